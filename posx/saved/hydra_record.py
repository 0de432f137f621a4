"""Hydra's record of how a run was started (``.hydra/overrides.yaml``, ``.hydra/hydra.yaml``),
read as untrusted input: ``posx resume`` and ``posx extend`` compose a run's config again from
it, and a shared run directory could put anything there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from omegaconf import ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posx.errors import ConfigError, damaged_file, one_line

# posx's own entries: resume sets train.resume itself, and the config dirs come from
# hydra.yaml (read_searchpath); every other Hydra setting is refused.
OWN = ("train.resume=", "hydra.searchpath=")


def read_overrides(path: Path) -> list[str]:
    """The config overrides a run was trained with: a list of ``key=value`` strings that leave
    Hydra's own settings alone.

    Raises:
        PosxError: The file is not a YAML list of strings.
        ConfigError: An entry sets Hydra itself (callbacks, launchers and flags run code).
    """
    loaded = _load(path)
    if not isinstance(loaded, ListConfig) or not all(isinstance(o, str) for o in loaded):
        raise damaged_file(path, "a list of key=value overrides was expected")
    overrides = [str(o) for o in loaded if not str(o).startswith(OWN)]
    for o in overrides:
        if o.startswith("-") or o.split("=", 1)[0].lstrip("+~").startswith("hydra"):
            raise ConfigError(
                f"{path} has {o!r}: a run's overrides may set posx's config only, not Hydra's "
                "settings or flags (those can run code); remove that line to resume"
            )
    return overrides


def read_searchpath(path: Path) -> list[Any]:
    """The ``hydra.searchpath`` a run was trained with, or ``[]`` when it has no such file.

    Raises:
        PosxError: The file is damaged.
    """
    if not path.is_file():
        return []
    value = _load(path, "hydra.searchpath") or []
    if not isinstance(value, ListConfig | list):
        raise damaged_file(path, "hydra.searchpath is not a list")
    return list(value)


def _load(path: Path, key: str | None = None) -> Any:
    """A YAML file of a run, or its ``key``; the file named as damaged when it cannot be
    read."""
    try:
        loaded = OmegaConf.load(path)
        return loaded if key is None else OmegaConf.select(loaded, key)
    except (OSError, ValueError, yaml.YAMLError, OmegaConfBaseException) as err:
        raise damaged_file(path, one_line(err)) from err
