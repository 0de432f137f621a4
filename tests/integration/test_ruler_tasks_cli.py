"""The token-level RULER tasks through the commands a user types: ``posx train -m
experiment=ruler_tasks`` (every encoding of the preset), ``posx report`` and ``posx check`` on its
claims, and one line for a length a task's defaults cannot reach.

The runs are a few steps long: this checks the plumbing, not that anything is learned."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import run_posx

SMALL = [
    "model.d_model=16",
    "model.n_heads=2",
    "model.n_layers=1",
    "model.d_ff=32",
    "train.steps=2",
    "train.batch_size=4",
    "train.warmup_steps=1",
    "eval.tokens=256",
    "seed=0",
]


@pytest.mark.slow  # four tiny trainings and a check through the CLI: ~30 s on a loaded CPU
def test_the_preset_trains_reports_and_checks(tmp_path: Path):
    run_posx("train", "-m", "experiment=ruler_tasks", "hydra/launcher=basic", *SMALL,
             f"root={tmp_path}", check=True)  # fmt: skip
    rows = pd.concat([pd.read_csv(p) for p in tmp_path.rglob("eval.csv")], ignore_index=True)
    assert set(rows["encoding"]) == {"nope", "rope", "alibi", "fire"}
    assert set(rows["task"]) == {"cwe"} and set(rows["eval_length"]) == {32, 64, 96, 128}
    assert (rows["status"] == "ok").all(), rows[["encoding", "status", "reason"]]
    out = run_posx("report", "--root", str(tmp_path), "--format", "md", check=True).stdout
    assert "cwe" in out and "L=128" in out
    proc = run_posx("check", str(tmp_path), "--format", "json")
    verdicts = {c["claim"]: c["verdict"] for c in json.loads(proc.stdout)["claims"]}
    assert {"learned_1x_rope", "nope_loses_2x", "fire_gone_4x"} <= set(verdicts)
    # One seed per encoding: too few for a verdict, and the check says so (exit 3).
    assert set(verdicts.values()) == {"inconclusive"} and proc.returncode == 3


@pytest.mark.parametrize(
    ("task", "length", "message"),
    [
        ("niah_multiquery", 16, "NeedleTask with min_size=1 needs length >= 22, got 16"),
        ("vt", 20, "VariableTrackingTask with min_size=1 needs length >= 24, got 20"),
        ("cwe", 512, "cwe at length 512 needs 499 distinct items but num_items = 256"),
    ],
)
def test_a_training_length_the_task_cannot_fill_is_one_line(tmp_path, task, length, message):
    proc = run_posx("train", *SMALL, f"task={task}", f"train.length={length}", f"root={tmp_path}")
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and message in line
    assert not any(tmp_path.iterdir()), "nothing written"
