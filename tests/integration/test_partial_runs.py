"""A run evaluated before its last step (interrupted, evaluated from its checkpoint) says so:
its rows record the steps done and planned, the report labels it, and claims leave it out
unless asked (it was shown as a plain row)."""

from __future__ import annotations

import json

import pandas as pd


def interrupted(run):
    """The tiny run as if stopped at step 4 of its 10 (its checkpoint's step)."""
    state = run / "checkpoint" / "trainer.json"
    trainer = json.loads(state.read_text())
    trainer["step"] = 4
    state.write_text(json.dumps(trainer))
    info = json.loads((run / "run.json").read_text())
    assert info["steps"] == 10
    return run


def test_rows_and_report_of_an_interrupted_run_say_how_far_it_trained(cli, copy_run, tmp_path):
    done, short = copy_run("done"), interrupted(copy_run("short"))
    result = cli("eval", str(done), str(short), "--lengths", "16,32", "--no-progress")
    assert result.returncode == 0, result.stderr
    rows = pd.read_csv(short / "eval.csv")
    new = rows[rows["eval_length"].isin([16, 32]) & rows["steps_done"].notna()]
    assert set(new["steps_done"]) == {4} and set(new["steps_planned"]) == {10}
    assert set(pd.read_csv(done / "eval.csv").dropna(subset=["steps_done"])["steps_done"]) == {10}
    report = cli("report", "--root", str(tmp_path), "--metric", "loss")
    assert report.returncode == 0, report.stderr
    assert "rope (4/10 steps)" in report.stdout  # never a plain `rope` row beside the other
    assert report.stdout.count("│ rope ") >= 1
