"""The rules for a saved run's config, path-free: its file typed by the schema, eval-time
overrides applied, ``eval.precision=auto`` as the run resolved it, and the words for data that
changed since training. :class:`posx.saved.SavedRun` reads the run's files and applies them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posx.config.fingerprint import RECORDED_PRECISION, data_identity
from posx.config.hints import key_hint
from posx.config.keys import at_or_below, override_key
from posx.config.schema import EvalConfig, PosxConfig
from posx.errors import ConfigError, PosxError, damaged_file, one_line
from posx.runtime.precision import PRECISIONS

# Eval settings recorded in their own columns (or not affecting results), so not in `overrides`.
PROTOCOL_KEYS = ("eval.mode", "eval.window", "eval.stride", "eval.buckets", "eval.batch_tokens")


def typed_config(
    path: Path, run_dir: Path, load: Callable[[Path], Any] = OmegaConf.load
) -> DictConfig:
    """A run's saved config file (``.hydra/config.yaml``), typed by posx's schema.

    Args:
        path: The file.
        run_dir: The run it belongs to (named when there is no file).
        load: Parses the file (a caller that has parsed it already returns its copy).

    Raises:
        ConfigError: No saved config.
        PosxError: The file is not YAML, or does not fit the schema (one line naming it).
    """
    if not path.is_file():
        raise ConfigError(f"not a posx run directory (no .hydra/config.yaml): {run_dir}")
    try:
        cfg = load(path)
        if not isinstance(cfg, DictConfig):
            raise ValueError(f"a mapping of settings was expected, found {type(cfg).__name__}")
        missing = [k for k in ("model", "train", "eval", "encoding", "task") if k not in cfg]
        if missing:
            raise ValueError(f"it has no {', '.join(missing)}")
        # Typed as at training, so a value of the wrong type fails here and not mid-way.
        typed = OmegaConf.merge(OmegaConf.structured(PosxConfig), cfg)
    except (OSError, ValueError, yaml.YAMLError, OmegaConfBaseException) as err:
        at = getattr(err, "full_key", None)
        raise damaged_file(path, one_line(err) + (f" at {at}" if at else "")) from err
    assert isinstance(typed, DictConfig)
    return typed


# Settings read only while training or when weights are first drawn: evaluation loads the
# trained weights, so an eval-time override of one would change no number, yet label its rows as
# a variant of the run (`learned+train.lr=5`). The training length and where it runs stay open.
TRAINING_ONLY = ("train", "seed", "extend", "encoding.init_std", "model.embed_init_std")
EVAL_READS = ("train.length", "train.device", "train.threads")


def training_only(key: str) -> bool:
    """Whether ``key`` is a setting evaluation never reads (:data:`TRAINING_ONLY`)."""
    return key not in EVAL_READS and at_or_below(key, TRAINING_ONLY)


def apply_overrides(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """Eval-time ``key=value`` overrides on a run's config (e.g. ``encoding.base=50000``).

    Raises:
        ConfigError: A bad override, an unknown key, or a setting only training reads.
    """
    cfg = cfg.copy()
    OmegaConf.set_struct(cfg, True)  # a misspelled key is an error, not a silent new key
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except OverrideParseException as err:
        raise ConfigError(f"bad eval override: {str(err).splitlines()[0]}") from err
    for o in parsed:
        try:
            OmegaConf.update(cfg, o.key_or_group, o.value(), force_add=o.is_add())
        except OmegaConfBaseException as err:
            # posx's hint (the nearest key, what the target class takes) says more than
            # OmegaConf's first line; that line stays for errors the hint cannot explain
            hint = key_hint(cfg, o.key_or_group)
            reason = f": unknown setting '{o.key_or_group}'{hint}" if hint else f": {one_line(err)}"
            raise ConfigError(f"bad eval override {o.input_line!r}{reason}") from err
        if training_only(o.key_or_group):  # a known key (an unknown one is refused above)
            raise ConfigError(
                f"bad eval override {o.input_line!r}: {o.key_or_group} is read only while "
                "training (the evaluated weights are the run's trained ones), so it would change "
                "no number; evaluate with encoding.*, eval.* or task.* settings, or train a run "
                "with it"
            )
    return cfg


def with_eval_defaults(cfg: DictConfig) -> DictConfig:
    """A run's saved config with eval settings added since it was trained (typed defaults)."""
    cfg = cfg.copy()
    cfg.eval = OmegaConf.merge(OmegaConf.structured(EvalConfig), cfg.eval)
    return cfg


def override_keys(overrides: Sequence[str]) -> set[str]:
    """The keys ``key=value`` overrides set (``+``/``~`` prefixes dropped)."""
    return {override_key(o) for o in overrides}


def recorded_eval_precision(
    cfg: DictConfig, info: dict[str, Any], overrides: Sequence[str]
) -> DictConfig:
    """``eval.precision=auto`` as the run resolved it when it was trained (``run.json``'s
    ``eval_precision``), wherever it is evaluated now: a GPU run (bf16) evaluated on a CPU is
    evaluated in bf16, so its rows are what its identity says (see
    :mod:`posx.config.fingerprint`). An ``eval.precision`` override is the user's choice, and
    a run that recorded none resolves ``auto`` on the device it is evaluated on."""
    value = info.get(RECORDED_PRECISION["eval"])
    if cfg.eval.precision != "auto" or "eval.precision" in override_keys(overrides):
        return cfg
    if value not in PRECISIONS[1:]:
        return cfg
    cfg = cfg.copy()
    cfg.eval.precision = value
    return cfg


def _change(key: str, was: Any, now: Any) -> str:
    """``crc32 A -> B``, ``9998 -> 10012 bytes``, ``held-out 500 -> 501 bytes``, ``sha256 ...``."""
    if key.endswith("sha256"):  # 64 hex digits: the first 12 tell them apart
        return f"sha256 {str(was)[:12]} -> {str(now)[:12] if now is not None else 'none'}"
    if key.endswith("crc32"):
        return f"crc32 {was} -> {now}"
    return f"{'held-out ' if key.startswith('val') else ''}{was} -> {now} bytes"


def data_changes(recorded: dict[str, Any], now: dict[str, Any]) -> tuple[list[str], list[str]]:
    """What differs between the data a run recorded and the data rebuilt now, in words: the
    corpus's changes and the tokenizer's."""
    corpus, tokenizer = [], []
    for key, was in recorded.items():
        if now.get(key) != was:
            into = tokenizer if key.startswith("tokenizer") else corpus
            into.append(_change(key, was, now.get(key)))
    return corpus, tokenizer


def data_change_error(run_dir: Path, task_info: Any, described: dict[str, Any]) -> PosxError | None:
    """The refusal of a run whose data is no longer what it was trained on, or None when it is:
    a corpus file edited, ``stdlib`` of another Python, a dataset or tokenizer file that
    changed. Its rows would be numbers on other text under the run's name.

    Args:
        run_dir: The run directory (named in the message).
        task_info: ``run.json``'s ``task_info`` (the data at training).
        described: The task rebuilt now (:meth:`~posx.tasks.base.Task.describe`).
    """
    corpus, tokenizer = data_changes(data_identity(task_info), data_identity(described))
    if not corpus and not tokenizer:
        return None
    name = str(task_info.get("corpus", "?")) if isinstance(task_info, dict) else "?"
    if corpus:
        what = f"the corpus {name!r} has changed since the run was trained ({', '.join(corpus)})"
        fix = f"restore the corpus, or evaluate on it as it is now with task.corpus={name}"
    else:
        what = f"its tokenizer has changed since the run was trained ({', '.join(tokenizer)})"
        fix = "restore it, or evaluate with it as it is now with a task.* override"
    return PosxError(
        f"{run_dir}: {what}, so its rows would score other tokens than its training did; "
        f"{fix} (an eval-time override, recorded in each row)"
    )


def recorded_overrides(overrides: list[str]) -> str:
    """The ``overrides`` column: sorted, space-joined, protocol settings left out."""
    keep = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in PROTOCOL_KEYS]
    return " ".join(sorted(keep))
