"""Orchestration: the policies that combine training, evaluation and sweeps into runs.

``posx.cli`` parses arguments and calls these; a notebook user calls them too. Below this layer,
:mod:`posx.training.loop` trains one model and :mod:`posx.evaluation.sweep` evaluates one run;
neither decides what happens next.

The names below are imported when first used: ``posx runs`` or a mistyped option must not wait
for torch, which the training and evaluation modules import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from posx.runs.evaluation import evaluate_runs, select_runs
    from posx.runs.extend.run import run_extend
    from posx.runs.job import train_and_evaluate
    from posx.runs.launch import run_train
    from posx.runs.preflight import check_overrides, split_args
    from posx.runs.resume import run_resume

_HOMES = {
    "check_overrides": "preflight",
    "evaluate_runs": "evaluation",
    "run_extend": "extend.run",
    "run_resume": "resume",
    "run_train": "launch",
    "select_runs": "evaluation",
    "split_args": "preflight",
    "train_and_evaluate": "job",
}
__all__ = [
    "check_overrides",
    "evaluate_runs",
    "run_extend",
    "run_resume",
    "run_train",
    "select_runs",
    "split_args",
    "train_and_evaluate",
]


def __getattr__(name: str) -> Any:
    """``posx.runs.NAME`` from its module, imported on first use."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"posx.runs.{_HOMES[name]}"), name)
