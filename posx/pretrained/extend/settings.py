"""What ``posx extend hf:NAME_OR_DIR`` takes: its ``key=value`` settings, checked, with their
defaults (:data:`DEFAULTS`), and the options of the command (:class:`Options`)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from posx.errors import ConfigError

# key=value settings of `posx extend hf:...`, with their defaults. The learning rate and warmup
# are Position Interpolation's (2e-5, 20 steps; Chen et al. 2023); the budget is short, as in
# the papers (PI 1000 steps, YaRN 400), and the same for every method (LCEG).
DEFAULTS: dict[str, Any] = {
    "extension": None,  # configs/extension/NAME.yaml: pi, ntk, yarn, llama3, pose, plain, control
    "extend.factor": 4.0,
    "extend.length": None,  # default: factor x the model's trained context
    "extend.steps": 200,
    "extend.lr": 2e-5,
    "extend.warmup_steps": 20,
    "train.batch_size": 8,  # windows per optimizer step, over all processes
    "train.micro_batch": 1,  # windows per forward pass and process (the rest: accumulation)
    "train.checkpointing": False,  # activation checkpointing: recompute each layer in backward
    "train.precision": "auto",  # auto: bf16 mixed precision on CUDA, fp32 on a CPU
    "train.grad_clip": 1.0,
    "train.checkpoint_every": 100,  # steps between sharded checkpoints (posx resume)
    "train.max_memory": None,  # per process, e.g. 70G (default: what the device has free)
    "train.device": "auto",
    "train.world_size": None,  # default: torchrun's; with --dry-run, the processes to plan for
    "task.corpus": "stdlib",
    "task.val_fraction": 0.05,
    "task.max_bytes": 8_000_000,
    "task.val_corpus": None,
    "eval.lengths": None,  # default: the trained context and the new length
    "eval.tokens": 16384,
    "eval.batch_tokens": 8192,
    "seed": 0,
    "label": None,
    "experiment": None,
    "root": "results",
}
POSITIVE = ("extend.steps", "train.batch_size", "train.micro_batch", "train.checkpoint_every",
            "eval.tokens", "eval.batch_tokens", "extend.length", "train.world_size")  # fmt: skip


@dataclass
class Options:
    """The command's options (``--dry-run``, ``--allow-download`` ...), beside the settings.

    Attributes:
        dry_run: Print the plan and the memory estimate, then exit.
        allow_download: Fetch a hub model missing from the local cache.
        revision: A hub branch, tag or commit.
        trust_remote_code: Models allowed to run their own code.
        config_dirs: The user's config dirs (their ``extension/*.yaml`` methods).
    """

    dry_run: bool = False
    allow_download: bool = False
    revision: str | None = None
    trust_remote_code: list[str] = field(default_factory=list)
    config_dirs: list[Path] = field(default_factory=list)


def parse_settings(words: list[str]) -> dict[str, Any]:
    """``key=value`` words -> settings over :data:`DEFAULTS`, checked.

    Raises:
        ConfigError: An unknown key (the keys listed), a value of the wrong kind, or no
            ``extension=``.
    """
    values = dict(DEFAULTS)
    for word in words:
        key, sep, text = word.partition("=")
        if not sep or key not in DEFAULTS:
            raise ConfigError(unknown_setting(key))
        try:
            values[key] = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise ConfigError(f"{word}: not a value ({err.__class__.__name__})") from err
    return check_settings(values)


def unknown_setting(key: str) -> str:
    """``posx extend hf:... has no setting 'extend.stepz'; did you mean extend.steps? ...``."""
    close = difflib.get_close_matches(key, list(DEFAULTS), n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]}? It takes " if close else "; it takes "
    return f"posx extend hf:... has no setting {key!r}{hint}" + ", ".join(DEFAULTS)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> Any:
    """``1e-3`` is a string to YAML 1.1; a number to the user."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def check_settings(values: dict[str, Any]) -> dict[str, Any]:
    """The settings, checked; returns ``values``.

    Raises:
        ConfigError: A value of the wrong kind, said with what is allowed.
    """
    if not values["extension"]:
        raise ConfigError(
            "posx extend hf:... needs a method: extension=NAME (pi, ntk, yarn, llama3, pose, "
            "plain, control; configs/extension/)"
        )
    for key in POSITIVE:
        value = values[key]
        if value is not None and (not _is_int(value) or value <= 0):
            raise ConfigError(f"{key} must be a positive integer, got {value!r}")
    for key in ("extend.warmup_steps", "seed"):
        if not _is_int(values[key]) or values[key] < 0:
            raise ConfigError(f"{key} must be an integer >= 0, got {values[key]!r}")
    for key, low in (("extend.factor", 1.0), ("extend.lr", 0.0), ("train.grad_clip", 0.0)):
        value = values[key] = _number(values[key])
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low:
            raise ConfigError(f"{key} must be a number >= {low:g}, got {value!r}")
    if values["train.precision"] not in ("auto", "fp32", "bf16"):
        raise ConfigError(
            f"train.precision must be auto, fp32 or bf16, got {values['train.precision']!r}"
        )
    if not isinstance(values["train.checkpointing"], bool):
        raise ConfigError("train.checkpointing must be true or false")
    lengths = values["eval.lengths"]
    if lengths is not None and (
        not isinstance(lengths, list) or not all(_is_int(n) and n > 0 for n in lengths)
    ):
        raise ConfigError(f"eval.lengths must be a list of positive integers, got {lengths!r}")
    if values["train.batch_size"] % values["train.micro_batch"]:
        raise ConfigError(
            f"train.batch_size ({values['train.batch_size']}) must be a multiple of "
            f"train.micro_batch ({values['train.micro_batch']})"
        )
    return values
