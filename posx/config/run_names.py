"""What a run is called: the labels of what it trained, in its directory name, ``run.json`` and
every report. A label is the chosen yaml's name, the class name of a ``_target_`` set over that
yaml, or the ``label`` the user gives; never the name of an option something else replaced."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from posx.config.paths import dirs_of_searchpath, option_target

# Groups whose chosen option names the run (in its directory, run.json and reports).
LABELLED = ("encoding", "task", "model", "positions")
LABEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def run_label(encoding: str, positions: str | None = None) -> str:
    """An encoding's label in run names and tables: ``rope``, or ``rope+randomized`` when a
    training-time position strategy other than the default is used."""
    return encoding if positions in (None, "", "default", "None") else f"{encoding}+{positions}"


def chosen_options(choices: Mapping[str, Any], dirs: Sequence[Path]) -> dict[str, dict[str, Any]]:
    """Per labelled group: the chosen yaml's ``name`` and the ``target`` it sets (``None`` when
    nothing was chosen), from Hydra's ``runtime.choices`` and the user's config dirs."""
    out: dict[str, dict[str, Any]] = {}
    for group in LABELLED:
        name = choices.get(group)
        name = None if name in (None, "null", "None") else str(name)
        out[group] = {"name": name, "target": option_target(group, name, dirs) if name else None}
    return out


def run_names(cfg: DictConfig, chosen: Mapping[str, Any]) -> dict[str, str]:
    """What the run is called, per labelled group: the chosen yaml's name; the class name when
    the composed ``_target_`` is not the yaml's own (``encoding._target_=mypkg.Mine`` is never
    called after the option it replaced); for the encoding, ``label`` when one is given."""
    names = {}
    for group in LABELLED:
        pick = chosen.get(group) or {}
        name, yaml_target = pick.get("name"), pick.get("target")
        node = cfg.get(group)
        target = node.get("_target_") if isinstance(node, DictConfig) else None
        if name and (target is None or target == yaml_target):
            names[group] = str(name)
        elif target:
            names[group] = str(target).rsplit(".", 1)[-1]
        else:
            names[group] = str(name or ("default" if group == "positions" else "custom"))
    if cfg.get("label"):
        names["encoding"] = str(cfg.label)
    return names


def run_name(cfg: DictConfig, names: Mapping[str, str]) -> str:
    """``<task>_<encoding label>_L<train length>_s<seed>``: a run directory's name without its
    invocation suffix."""
    label = run_label(names["encoding"], names.get("positions"))
    return f"{names['task']}_{label}_L{cfg.train.length}_s{cfg.seed}"


def run_name_resolver(*, _root_: DictConfig) -> str:
    """``${posx_run_name:}`` in configs/hydra/default.yaml: resolved while Hydra's node is part
    of the config, so the choices and search path it read are at hand."""
    hydra_node = _root_.hydra
    chosen = chosen_options(hydra_node.runtime.choices, dirs_of_searchpath(hydra_node.searchpath))
    return run_name(_root_, run_names(_root_, chosen))
