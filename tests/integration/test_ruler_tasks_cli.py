"""The token-level RULER tasks through the commands a user types: ``posx train -m
experiment=ruler_tasks`` and ``experiment=ruler_retrieval`` (every encoding of each preset),
``posx report`` and ``posx check`` on their claims, and one line for a length a task's defaults
cannot reach.

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


PRESETS = {  # preset: (its task, its eval lengths, claims it must have)
    "ruler_tasks": ("cwe", {32, 64, 96, 128}, {"learned_1x_rope", "nope_loses_2x", "fire_gone_4x"}),
    "ruler_retrieval": ("niah_multikey", {64, 128, 192, 256}, {"learned_1x_alibi"}),
}


@pytest.mark.slow  # four tiny trainings and a check through the CLI: ~30 s on a loaded CPU
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_the_preset_trains_reports_and_checks(tmp_path: Path, preset: str):
    task, lengths, claims = PRESETS[preset]
    run_posx("train", "-m", f"experiment={preset}", "hydra/launcher=basic", *SMALL,
             f"root={tmp_path}", check=True)  # fmt: skip
    rows = pd.concat([pd.read_csv(p) for p in tmp_path.rglob("eval.csv")], ignore_index=True)
    assert set(rows["encoding"]) == {"nope", "rope", "alibi", "fire"}
    assert set(rows["task"]) == {task} and set(rows["eval_length"]) == lengths
    assert (rows["status"] == "ok").all(), rows[["encoding", "status", "reason"]]
    out = run_posx("report", "--root", str(tmp_path), "--format", "md", check=True).stdout
    assert task in out and f"L={max(lengths)}" in out
    proc = run_posx("check", str(tmp_path), "--format", "json")
    verdicts = {c["claim"]: c["verdict"] for c in json.loads(proc.stdout)["claims"]}
    assert claims <= set(verdicts)
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
