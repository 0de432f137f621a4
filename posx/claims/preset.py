"""What a preset's own config says its runs are: the tasks it trains, read from
``configs/experiment/NAME.yaml`` (and the arms it sweeps), so that ``posx check`` judges a
preset's claims on its own tasks' runs and leaves another task's runs in the same root aside.

Only plain YAML is read (``yaml.safe_load``), never composed through Hydra: the tasks a preset
names are those of its defaults list (``override /task: text``), of its sweep
(``hydra.sweeper.params.task: copy,reverse``) and of the arms it uses (``/arm: NAME`` in its
defaults, ``hydra.sweeper.params.arm``: each arm's own ``override /task``). A preset that names
none (or whose files cannot be read) has no known task: its claims then see every task.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from posx.config.paths import options

TASK_KEYS = ("override /task", "/task", "task")
ARM_KEYS = ("override /arm", "/arm", "arm")


def preset_tasks(name: str, dirs: Sequence[Path] = ()) -> list[str]:
    """The tasks preset ``name`` trains (sorted), or ``[]`` where its config names none."""
    path = options("experiment", dirs).get(name)
    node = _read(path) if path is not None else None
    if not isinstance(node, dict):
        return []
    tasks = set(_chosen(node, TASK_KEYS))
    arms = options("arm", dirs)
    for arm in _chosen(node, ARM_KEYS):
        if arm in arms:
            tasks |= set(_chosen(_read(arms[arm]), TASK_KEYS))
    return sorted(tasks)


def _chosen(node: Any, keys: Sequence[str]) -> Iterator[str]:
    """The options a config picks for a group: its defaults list's entries and its sweep's
    comma-separated values."""
    if not isinstance(node, dict):
        return
    for entry in node.get("defaults") or []:
        if isinstance(entry, dict):
            yield from (str(v) for k, v in entry.items() if k in keys and isinstance(v, str))
    hydra = node.get("hydra")
    sweeper = hydra.get("sweeper") if isinstance(hydra, dict) else None
    params = sweeper.get("params") if isinstance(sweeper, dict) else None
    if isinstance(params, dict):
        value = params.get(keys[-1])
        if isinstance(value, str):
            yield from (v.strip() for v in value.split(",") if v.strip())


def _read(path: Path) -> Any:
    """A config file's plain YAML, or None where it cannot be read (the preset's tasks are
    then unknown: its claims see every task, as before this module)."""
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
