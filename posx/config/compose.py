"""Config composition (Hydra, with the user's config dirs) and validation of what the typed
schemas (:mod:`posx.config.schema`) cannot check: one-line errors for every bad value."""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Sequence
from pathlib import Path

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posx.config.hints import one_line, override_error
from posx.config.paths import (
    CONFIG_DIR,
    GROUPS,
    choices,
    dirs_of_searchpath,
    searchpath_override,
    user_config_dirs,
)
from posx.config.run_names import run_name_resolver
from posx.config.schema import PosxConfig
from posx.errors import ConfigError


def new_invocation() -> str:
    """``YYYYmmdd-HHMMSS_<6 hex digits>``: unique per ``posx train`` invocation, also for two
    started in the same second."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}_{secrets.token_hex(3)}"


def register() -> None:
    """Registers the schema and the ``posx_run_name`` resolver (idempotent). Called by whatever
    composes a config, never at import time."""
    store = ConfigStore.instance()
    if "posx_schema.yaml" not in store.repo:  # converting the schema costs ~6 ms a compose
        store.store(name="posx_schema", node=PosxConfig)
    if not OmegaConf.has_resolver("posx_run_name"):
        OmegaConf.register_new_resolver("posx_run_name", run_name_resolver)


def split_searchpath(overrides: Sequence[str]) -> tuple[list[Path], list[str]]:
    """The directories of a ``hydra.searchpath=[...]`` override, and the other overrides (posx
    adds the user's dirs itself, so that it also knows their options)."""
    dirs: list[Path] = []
    rest = []
    for o in overrides:
        if o.split("=", 1)[0].lstrip("+~") != "hydra.searchpath":
            rest.append(o)
            continue
        try:
            value = OverridesParser.create().parse_override(o).value()
        except HydraException as err:
            raise ConfigError(f"bad override: {one_line(err)}") from err
        dirs += dirs_of_searchpath(value if isinstance(value, list) else [value])
    return dirs, rest


def config_dirs(
    dirs: Sequence[Path] | None, overrides: Sequence[str]
) -> tuple[list[Path], list[str]]:
    """The user's config dirs (``dirs``, default: the environment's, plus a
    ``hydra.searchpath`` override's) and the overrides without that one."""
    extra, rest = split_searchpath(overrides)
    base = user_config_dirs() if dirs is None else list(dirs)
    return (user_config_dirs([*base, *extra], env=False) if extra else base), rest


def compose(
    overrides: Sequence[str], dirs: Sequence[Path] | None = None, hydra_node: bool = False
) -> DictConfig:
    """The config ``posx train OVERRIDES`` would run with; bad overrides raise ConfigError.

    Args:
        overrides: Hydra overrides (``encoding=alibi``, ``train.steps=5``, ...).
        dirs: The user's config dirs (default: from ``POSX_CONFIG_PATH``), searched after the
            built-in configs.
        hydra_node: Keep Hydra's own node (``cfg.hydra``: choices, search path, run dir).
    """
    register()
    dirs, rest = config_dirs(dirs, overrides)
    full = [*rest, *searchpath_override(dirs)]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        try:
            return hydra_compose(
                config_name="config", overrides=full, return_hydra_config=hydra_node
            )
        except (HydraException, OmegaConfBaseException, ValueError) as err:
            raise override_error(err, full) from err


def check_group_value(group: str, value: str, dirs: Sequence[Path] | None = None) -> None:
    """``encoding=rpoe`` fails here, naming the options (built-in and the user's), before
    Hydra's longer message.

    A list selects several options of one group (``logger=[tensorboard,mlflow]``); each is
    checked.
    """
    if group not in GROUPS:
        return
    listed = value.startswith("[") and value.endswith("]")
    names = [v.strip() for v in value[1:-1].split(",") if v.strip()] if listed else [value]
    known = choices(group, dirs)
    for name in names:
        if name not in ("null", "None") and name not in known:
            raise ConfigError(f"unknown {group} '{name}'; choose from: {', '.join(known)}")


DEFAULT_EVAL_FACTORS = (1, 2, 4, 8)


def eval_lengths(cfg: DictConfig) -> list[int]:
    """The lengths a run is evaluated at: ``eval.lengths`` when set, else ``train.length``
    times the factors the task brings (``design.eval_factors``: arithmetic's 1x, 1.5x, 2x and
    3x, from configs/design/digits.yaml), or times 1, 2, 4 and 8; rounded, each once."""
    if cfg.eval.get("lengths") is not None:
        return [int(x) for x in cfg.eval.lengths]
    design = cfg.get("design") or {}
    factors = design.get("eval_factors") or DEFAULT_EVAL_FACTORS
    length = int(cfg.train.length)
    return sorted({max(1, math.floor(float(f) * length + 0.5)) for f in factors})
