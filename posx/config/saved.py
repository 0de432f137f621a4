"""A saved run's config, read back: typed by the schema, checked against its checkpoint and the
trust rules, with eval-time overrides applied. ``posx eval`` and ``posx resume`` load runs
through here."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posx.config.compose import key_hint, validate
from posx.config.schema import EvalConfig, PosxConfig
from posx.config.trust import check_trusted, recorded
from posx.errors import ConfigError, PosxError, one_line
from posx.storage.checkpoint import check_identity
from posx.storage.results import run_info

# Eval settings recorded in their own columns (or not affecting results), so not in `overrides`.
PROTOCOL_KEYS = ("eval.mode", "eval.window", "eval.stride", "eval.buckets", "eval.batch_tokens")


def run_config(run_dir: Path) -> DictConfig:
    """The config Hydra saved for the run, typed by posx's schema.

    Raises:
        ConfigError: No run directory, or no saved config.
        PosxError: The saved config is not YAML, or does not fit the schema (one line naming
            the file).
    """
    path = run_dir / ".hydra" / "config.yaml"
    if not run_dir.is_dir():
        raise ConfigError(f"run directory does not exist: {run_dir}")
    if not path.is_file():
        raise ConfigError(f"not a posx run directory (no .hydra/config.yaml): {run_dir}")
    try:
        cfg = OmegaConf.load(path)
        if not isinstance(cfg, DictConfig):
            raise ValueError(f"a mapping of settings was expected, found {type(cfg).__name__}")
        missing = [k for k in ("model", "train", "eval", "encoding", "task") if k not in cfg]
        if missing:
            raise ValueError(f"it has no {', '.join(missing)}")
        # Typed as at training, so a value of the wrong type fails here and not mid-way.
        typed = OmegaConf.merge(OmegaConf.structured(PosxConfig), cfg)
    except (OSError, ValueError, yaml.YAMLError, OmegaConfBaseException) as err:
        at = getattr(err, "full_key", None)
        raise PosxError(
            f"{path} is damaged ({one_line(err)}{f' at {at}' if at else ''}); restore it from a "
            "backup, or move the run aside"
        ) from err
    assert isinstance(typed, DictConfig)
    return typed


def apply_overrides(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """Eval-time ``key=value`` overrides on a run's config (e.g. ``encoding.base=50000``)."""
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
            raise ConfigError(
                f"bad eval override {o.input_line!r}: {str(err).splitlines()[0]}"
                + key_hint(cfg, o.key_or_group)
            ) from err
    return cfg


def with_eval_defaults(cfg: DictConfig) -> DictConfig:
    """A run's saved config with eval settings added since it was trained (typed defaults)."""
    cfg = cfg.copy()
    cfg.eval = OmegaConf.merge(OmegaConf.structured(EvalConfig), cfg.eval)
    return cfg


def check_loadable(
    run_dir: Path,
    cfg: DictConfig,
    source: Path | str,
    trust: Sequence[str],
    info: dict[str, Any],
    composed: bool = False,
) -> None:
    """Refuses a run's config that is not safe or not right to build: what ``posx eval`` (the
    saved config) and ``posx resume`` (its overrides, composed) both check first.

    Args:
        run_dir: The run directory.
        cfg: The config read from the run (saved, or composed from its overrides).
        source: The run's file it came from, for the messages.
        trust: Trusted ``_target_`` prefixes (see :mod:`posx.config.trust`).
        info: The run's ``run.json`` (``{}`` when it has none): its ``needs_trust`` words the
            trust message.
        composed: ``cfg`` was composed from ``source`` with posx's configs (said in the
            checkpoint message).

    Raises:
        ConfigError: A target that is not trusted.
        PosxError: A config that does not match the checkpoint.
    """
    check_trusted(cfg, trust, str(source), recorded(info))
    check_identity(
        run_dir, cfg, f"{source} (composed with posx's configs)" if composed else str(source)
    )


def loadable_config(run_dir: Path, overrides: list[str], trust: Sequence[str] = ()) -> DictConfig:
    """The run's config with eval-time ``overrides``, once it is safe and right to build.

    The saved config must be what the checkpoint was trained with (an edited config would
    label these weights as another encoding's), and every ``_target_`` in it must be posx's
    own or trusted (``trust``; see :mod:`posx.config.trust`): a run directory cannot run code.

    Raises:
        ConfigError: A bad override, or a target that is not trusted.
        PosxError: A damaged config, or one that does not match the checkpoint.
    """
    source = run_dir / ".hydra" / "config.yaml"
    saved = run_config(run_dir)
    check_loadable(run_dir, saved, source, trust, run_info(run_dir))
    cfg = apply_overrides(with_eval_defaults(saved), overrides)
    check_trusted(cfg, trust, "eval-time overrides", None)  # what they add is the user's
    validate(cfg)
    return cfg


def recorded_overrides(overrides: list[str]) -> str:
    """The ``overrides`` column: sorted, space-joined, protocol settings left out."""
    keep = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in PROTOCOL_KEYS]
    return " ".join(sorted(keep))
