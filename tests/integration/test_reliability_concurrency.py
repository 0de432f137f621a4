"""Two processes on one results tree lose nothing: concurrent `posx eval` on one run keep every
row (eval.csv is merged under a lock), and two sweeps into one root never share a directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
TINY = [
    "task=copy",
    "model.d_model=32",
    "model.n_layers=1",
    "model.n_heads=4",
    "model.d_ff=64",
    "train.length=16",
    "train.batch_size=8",
    "train.warmup_steps=2",
    "train.log_every=5",
    "train.progress=false",
    "eval.tokens=256",
]


def start(*args: str) -> subprocess.Popen:
    env = {**os.environ, "POSX_DEBUG": "0", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "posx", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    return out


def rows_of(table: Path) -> list[tuple[int, str]]:
    frame = pd.read_csv(table, keep_default_na=False)
    return sorted(zip(frame["eval_length"], frame["overrides"], strict=True))


@pytest.mark.slow
def test_two_evals_of_one_run_keep_every_row(cli, tmp_path):
    out = cli("train", *TINY, "train.steps=10", "eval.lengths=[16]", f"root={tmp_path}")
    assert out.returncode == 0, out.stderr
    (run,) = [p.parent for p in tmp_path.rglob("run.json")]
    assert rows_of(run / "eval.csv") == [(16, "")]

    # Started together; each reads, merges and rewrites eval.csv and eval_positions.csv.
    procs = [
        start("eval", str(run), "--lengths", "32,48", "--no-progress"),
        start("eval", str(run), "--lengths", "16,64", "encoding.base=500", "--no-progress"),
    ]
    for proc in procs:
        finish(proc)
    got = rows_of(run / "eval.csv")
    assert got == [
        (16, ""),
        (16, "encoding.base=500"),
        (32, ""),
        (48, ""),
        (64, "encoding.base=500"),
    ]
    assert set(rows_of(run / "eval_positions.csv")) == set(got)
    assert not list(run.glob(".*.tmp"))


def sweep_runs(root: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for info in sorted(root.glob("sweeps/*/*/run.json")):
        out.setdefault(info.parent.parent.name, []).append(info.parent.name)
    return out


def check_sweeps(root: Path) -> None:
    sweeps = sweep_runs(root)
    assert len(sweeps) == 2, sweeps  # one directory per sweep
    for runs in sweeps.values():
        assert runs == ["copy_rope_L16_s0_0", "copy_rope_L16_s1_1"]
    for info in root.glob("sweeps/*/*/run.json"):
        run = info.parent
        assert json.loads(info.read_text())["status"] == "trained"
        rows = pd.read_csv(run / "eval.csv")
        assert list(rows["eval_length"]) == [16] and rows["run"].nunique() == 1
        assert (run / "checkpoint" / "model.safetensors").is_file()


@pytest.mark.slow
def test_two_sweeps_started_in_the_same_second_do_not_collide(cli, tmp_path, monkeypatch):
    """Sweep directories are named <time>_<random id>; with the clock frozen, only the id
    separates them."""
    import posx.config.compose

    monkeypatch.setattr(posx.config.compose.time, "strftime", lambda *_: "20250101-000000")
    args = ["train", "-m", "seed=0,1", *TINY, "train.steps=3", "eval.lengths=[16]"]
    for _ in range(2):
        out = cli(*args, f"root={tmp_path}")
        assert out.returncode == 0, out.stderr
    assert all(name.startswith("20250101-000000_") for name in sweep_runs(tmp_path))
    check_sweeps(tmp_path)


@pytest.mark.slow
def test_two_sweep_processes_into_one_root(tmp_path):
    args = ["train", "-m", "seed=0,1", *TINY, "train.steps=3", "eval.lengths=[16]"]
    procs = [start(*args, f"root={tmp_path}") for _ in range(2)]
    time.sleep(0.1)
    for proc in procs:
        finish(proc)
    check_sweeps(tmp_path)
