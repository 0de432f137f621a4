"""A saved run read back with what its run.json records: ``eval.precision=auto`` is evaluated
as the run resolved it when it was trained, wherever ``posx eval`` runs now."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from posx.runs.evaluation import evaluate_runs
from posx.saved import SavedRun


def record(run: Path, **fields) -> None:
    info = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**info, **fields}))


def test_auto_eval_precision_is_the_one_the_run_recorded(copy_run):
    """A run trained on a GPU (auto: bf16) and evaluated on the CPU is evaluated in bf16, as at
    the end of its training; its rows match the identity its run.json gives it."""
    run = copy_run()
    record(run, eval_precision="bf16")
    assert SavedRun(run).loadable_config([]).eval.precision == "bf16"
    (rows,) = evaluate_runs([run], [16], [], device="cpu").values()
    assert rows[0]["precision"] == "bf16" and rows[0]["device"] == "cpu"
    assert rows[0]["overrides"] == ""
    stored = pd.read_csv(run / "eval.csv", keep_default_na=False)
    assert list(stored.loc[stored["eval_length"] == 16, "precision"]) == ["bf16"]


def test_an_eval_precision_override_wins_and_is_recorded(copy_run):
    run = copy_run()
    record(run, eval_precision="bf16")
    assert SavedRun(run).loadable_config(["eval.precision=fp32"]).eval.precision == "fp32"
    (rows,) = evaluate_runs([run], [16], ["eval.precision=auto"], device="cpu").values()
    assert rows[0]["precision"] == "fp32"  # auto on this device, asked for by the user
    assert rows[0]["overrides"] == "eval.precision=auto"


def test_a_run_that_recorded_no_precision_resolves_auto_where_it_runs(copy_run):
    """Runs trained before run.json recorded it evaluate as before (fp32 on the CPU)."""
    run = copy_run()
    info = json.loads((run / "run.json").read_text())
    info.pop("eval_precision", None)
    info.pop("train_precision", None)
    (run / "run.json").write_text(json.dumps(info))
    assert SavedRun(run).loadable_config([]).eval.precision == "auto"
    (rows,) = evaluate_runs([run], [16], [], device="cpu").values()
    assert rows[0]["precision"] == "fp32"
