"""Ctrl-C checkpoints and exits 130; `posx resume` ends bit-identical to an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

REPO = Path(__file__).resolve().parents[2]


def weights(run):
    return load_file(str(run / "checkpoint" / "model.safetensors"))


@pytest.mark.slow
def test_interrupt_then_resume_equals_uninterrupted(posx, tiny_overrides, tmp_path):
    args = [*tiny_overrides, "encoding=rope", "train.steps=300", "train.log_every=5"]
    posx("train", *args, "root=" + str(tmp_path / "a"), check=True)
    (straight,) = [p.parent for p in (tmp_path / "a").rglob("run.json")]

    env = {**os.environ, "POSX_DEBUG": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "posx", "train", *args, "root=" + str(tmp_path / "b")],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while not list((tmp_path / "b").rglob("metrics.csv")) and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted at step" in err and "posx resume" in err
    (run,) = [p.parent for p in (tmp_path / "b").rglob("run.json")]
    info = json.loads((run / "run.json").read_text())
    stopped = json.loads((run / "checkpoint" / "trainer.json").read_text())["step"]
    assert info["status"] == "interrupted" and 0 < stopped < 300 and info["step"] == stopped
    assert not (run / "eval.csv").exists()

    posx("resume", str(run), check=True)
    assert json.loads((run / "run.json").read_text())["status"] == "trained"
    a, b = weights(straight), weights(run)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    la, lb = pd.read_csv(straight / "metrics.csv"), pd.read_csv(run / "metrics.csv")
    assert list(la["step"]) == list(lb["step"]) and list(la["loss"]) == list(lb["loss"])
    assert (run / "eval.csv").is_file()


def test_resume_without_checkpoint_is_an_error(cli, tmp_path):
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text("- encoding=rope\n")
    out = cli("resume", str(run))
    assert out.returncode == 1 and "run has no checkpoint" in out.stderr
