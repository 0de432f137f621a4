"""Orchestration: the policies that combine training, evaluation and sweeps into runs.

``posx.cli`` parses arguments and calls these; a notebook user calls them too. Below this layer,
:mod:`posx.training.loop` trains one model and :mod:`posx.evaluation.sweep` evaluates one run;
neither decides what happens next.
"""

from posx.runs.evaluation import evaluate_runs, select_runs
from posx.runs.extend import run_extend
from posx.runs.launch import run_train, train_and_evaluate
from posx.runs.preflight import check_overrides, split_args
from posx.runs.resume import run_resume

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
