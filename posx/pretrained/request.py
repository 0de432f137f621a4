"""What ``posx eval hf:NAME_OR_DIR`` was asked: the ``key=value`` settings it takes, checked,
and the whole request (:class:`Request`) that :mod:`posx.pretrained.run` carries out."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from posx.errors import ConfigError
from posx.pretrained.evaluate import Settings
from posx.pretrained.passkey import DEPTHS
from posx.ruler.registry import parse_tasks

if TYPE_CHECKING:  # read before torch is imported (the plan of a --dry-run needs none)
    from posx.runtime.distributed import World

SUITES = ("text", "ruler")

# key=value settings `posx eval hf:...` takes, with their defaults
DEFAULTS: dict[str, Any] = {
    "task.corpus": "stdlib",
    "task.val_fraction": 0.05,
    "task.max_bytes": 8_000_000,
    "task.val_corpus": None,
    "eval.tokens": 16384,
    "eval.batch_tokens": 8192,
    "eval.seed": 0,
    "passkey.trials": 5,
    "passkey.depths": list(DEPTHS),
    "ruler.tasks": "all",
    "ruler.samples": 10,
    "ruler.template": "base",
    "ruler.threshold": 85.6,
    "train_length": None,
    "label": None,
    "experiment": None,
}


@dataclass
class Request:
    """What ``posx eval hf:...`` was asked.

    Attributes:
        word: ``hf:NAME_OR_DIR``.
        settings: Lengths, protocol, variants.
        values: The ``key=value`` settings (see :data:`DEFAULTS`).
        passkey: Also run passkey retrieval.
        root: Results root.
        device: ``auto``, ``cpu``, ``cuda``, ``cuda:N``.
        dtype: ``auto`` (bf16 on GPU, fp32 on CPU), ``fp32``, ``bf16``, ``fp16``.
        device_map: ``accelerate`` device map (``auto``: spread over the machine's GPUs).
        trust_remote_code: Models allowed to run their own code.
        revision: Hub revision.
        allow_download: Fetch a model missing from the cache.
        max_memory: Memory limit in bytes.
        logger: Trackers chosen on this command (name -> settings), added to those an
            earlier evaluation of the model chose.
        sweep_dir: The Hydra sweep this evaluation is a job of, else None.
        run_dir: The run directory to write (an extension's own), else the model's under
            ``root/pretrained/``.
        record: What ``run.json`` records beside the evaluation (an extension's lineage).
        suites: What to evaluate: ``text`` (perplexity over the held-out text) and/or
            ``ruler`` (RULER's tasks, the ``ruler.*`` settings).
        world: The processes that evaluate (None: torchrun's). An extension trained under
            torchrun is evaluated by its rank 0 alone, after the others have left.
    """

    word: str
    settings: Settings
    values: dict[str, Any] = field(default_factory=dict)
    passkey: bool = False
    root: Path = Path("results")
    device: str = "auto"
    dtype: str = "auto"
    device_map: str | None = None
    trust_remote_code: list[str] = field(default_factory=list)
    revision: str | None = None
    allow_download: bool = False
    max_memory: int | None = None
    logger: dict[str, Any] = field(default_factory=dict)
    sweep_dir: Path | None = None
    run_dir: Path | None = None
    record: dict[str, Any] = field(default_factory=dict)
    suites: tuple[str, ...] = ("text",)
    world: World | None = None


def parse_values(overrides: list[str]) -> dict[str, Any]:
    """``key=value`` words -> settings (YAML values), over :data:`DEFAULTS`.

    Raises:
        ConfigError: An unknown key (the keys are listed) or a value of the wrong kind.
    """
    values = dict(DEFAULTS)
    for word in overrides:
        key, _, text = word.partition("=")
        if key not in DEFAULTS:
            raise ConfigError(
                f"posx eval hf:... has no setting {key!r}; it takes {', '.join(DEFAULTS)}"
            )
        try:
            values[key] = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise ConfigError(f"{word}: not a value ({err.__class__.__name__})") from err
    return check_values(values)


def check_values(values: dict[str, Any]) -> dict[str, Any]:
    """The settings of :data:`DEFAULTS`, checked (from ``key=value`` words or a sweep job's
    composed config).

    Returns:
        ``values``.

    Raises:
        ConfigError: A value of the wrong kind, said with what is allowed.
    """
    for key in (
        "eval.tokens",
        "eval.batch_tokens",
        "passkey.trials",
        "train_length",
        "ruler.samples",
    ):
        value = values[key]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value <= 0):  # fmt: skip
            raise ConfigError(f"{key} must be a positive integer, got {value!r}")
    depths = values["passkey.depths"]
    if (
        not isinstance(depths, list)
        or not depths
        or not all(isinstance(d, (int, float)) and 0 <= d <= 1 for d in depths)
    ):
        raise ConfigError(f"passkey.depths must be a list of numbers in [0, 1], got {depths!r}")
    threshold = values["ruler.threshold"]
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise ConfigError(f"ruler.threshold must be a score in percent, got {threshold!r}")
    if values["ruler.template"] not in ("base", "chat"):
        raise ConfigError(f"ruler.template must be base or chat, got {values['ruler.template']!r}")
    try:
        values["ruler.tasks"] = parse_tasks(values["ruler.tasks"])
    except ValueError as err:
        raise ConfigError(f"ruler.tasks: {err}") from err
    return values


def parse_suites(text: str | None) -> tuple[str, ...]:
    """``--suite text,ruler`` -> ``("text", "ruler")`` (default ``text``).

    Raises:
        ConfigError: An unknown suite.
    """
    names = [s.strip() for s in (text or "text").split(",") if s.strip()]
    bad = [s for s in names if s not in SUITES]
    if bad or not names:
        raise ConfigError(
            f"unknown --suite {bad[0] if bad else text!r}; choose from {', '.join(SUITES)} "
            "(comma-separated: text,ruler)"
        )
    return tuple(dict.fromkeys(names))
