"""What a run is called: the labels of what it trained, in its directory name, ``run.json`` and
every report. A label is the chosen yaml's name, the class name of a ``_target_`` set over that
yaml, or the ``label`` the user gives; never the name of an option something else replaced."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posx.config.paths import dirs_of_searchpath, option_target
from posx.config.variant_names import short_label

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
    elif OmegaConf.select(cfg, "extend.parent"):
        names["run_label"] = extension_label(cfg, names.get("positions"))
    return names


def _plain(node: object) -> object:
    """A config node as plain data, resolved where it can be (``{}`` when it is absent)."""
    if node is None:
        return {}
    try:
        return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    except OmegaConfBaseException:
        return OmegaConf.to_container(node, resolve=False)


def _leaves(value: object, prefix: str, out: dict[str, str]) -> dict[str, str]:
    if isinstance(value, dict):
        for key, item in value.items():
            _leaves(item, f"{prefix}.{key}", out)
    else:
        out[prefix] = str(value)
    return out


def parent_config(cfg: DictConfig) -> DictConfig | None:
    """The saved config of an extension's parent (``extend.parent``), or None when it cannot
    be read (``posx extend`` has checked it before the run started)."""
    path = Path(str(cfg.extend.parent)) / ".hydra" / "config.yaml"
    try:
        loaded = OmegaConf.load(path)
    except (OSError, ValueError, OmegaConfBaseException):
        return None
    return loaded if isinstance(loaded, DictConfig) else None


def base_of(cfg: DictConfig) -> tuple[DictConfig | None, str]:
    """The first base of an extension's lineage (the run trained from scratch its chain
    starts at): its saved config and its label. Up the chain through each ancestor's
    ``extend.parent``; where an ancestor cannot be read, the oldest one that can, with its
    own label."""
    node, label = cfg, str(cfg.extend.parent_label or "parent")
    for _ in range(64):  # a chain of extensions, never a cycle (each names an older run)
        parent = parent_config(node)
        if parent is None:
            return None, label
        if not OmegaConf.select(parent, "extend.parent"):
            return parent, label
        node, label = parent, str(OmegaConf.select(parent, "extend.parent_label") or label)
    return None, label


def _named_changes(mine: dict[str, str], old: dict[str, str]) -> str:
    """The encoding settings an extension changed, as a label names them: a node with a
    ``type`` by its type and factor (``yarn×16``, its other keys left to the report's
    "differs in"), any other changed key as ``key=value``."""
    changed = {k: v for k, v in mine.items() if old.get(k) != v}
    typed = {k.rsplit(".", 1)[0] for k in mine if k.endswith(".type")}
    for node in typed:
        if any(k.startswith(f"{node}.") for k in changed):
            changed = {k: v for k, v in changed.items() if not k.startswith(f"{node}.")}
            changed[f"{node}.type"] = mine[f"{node}.type"]
            if f"{node}.factor" in mine:
                changed[f"{node}.factor"] = mine[f"{node}.factor"]
    return " ".join(f"{k}={v}" for k, v in sorted(changed.items()))


def extension_label(cfg: DictConfig, positions: str | None) -> str:
    """What an extension is called: its first base's label, what its encoding holds that the
    base's does not (as an eval-time variant of the same change is named: ``+yarn×4``), the
    position strategy it switched to (``+pose``) and the length it fine-tuned at:
    ``rope+yarn×4+ft@256``. An extension of it is named from the same base
    (``rope+yarn×16+ft@1024``: the scaling counts from the base's positions).

    Args:
        cfg: The extension's config (``extend.parent``, ``extend.parent_label``).
        positions: The label of its position strategy.
    """
    base, base_label = base_of(cfg)
    theirs = _plain(base.get("encoding")) if base is not None else {}
    ours = _plain(cfg.get("encoding"))
    mine, old = _leaves(ours, "encoding", {}), _leaves(theirs, "encoding", {})
    label = short_label(base_label, _named_changes(mine, old) if theirs else "")
    if base is not None and _plain(base.get("positions")) != _plain(cfg.get("positions")):
        label += f"+{positions or 'default'}"
    return f"{label}+ft@{cfg.train.length}"


def dir_label(label: str) -> str:
    """A label as a directory name has it: ``rope+yarn×4+ft@256`` -> ``rope+yarnx4+ft256``."""
    return label.replace("×", "x").replace("@", "")


def run_name(cfg: DictConfig, names: Mapping[str, str]) -> str:
    """``<task>_<encoding label>_L<train length>_s<seed>``: a run directory's name without its
    invocation suffix."""
    label = names.get("run_label") or run_label(names["encoding"], names.get("positions"))
    return f"{names['task']}_{dir_label(label)}_L{cfg.train.length}_s{cfg.seed}"


def run_name_resolver(*, _root_: DictConfig) -> str:
    """``${posx_run_name:}`` in configs/hydra/default.yaml: resolved while Hydra's node is part
    of the config, so the choices and search path it read are at hand."""
    hydra_node = _root_.hydra
    chosen = chosen_options(hydra_node.runtime.choices, dirs_of_searchpath(hydra_node.searchpath))
    return run_name(_root_, run_names(_root_, chosen))
