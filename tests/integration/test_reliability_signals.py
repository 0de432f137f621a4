"""Ctrl-C during `posx eval` exits 130 and leaves the run's tables as they were (eval rows are
merged only once every length is done). Ctrl-C during training: test_resume.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_ctrl_c_during_eval_changes_no_table(cli, tiny_overrides, tmp_path):
    out = cli("train", *tiny_overrides, "train.steps=5")
    assert out.returncode == 0, out.stderr
    (run,) = [p.parent for p in tmp_path.rglob("run.json")]
    tables = {name: (run / name).read_bytes() for name in ("eval.csv", "eval_positions.csv")}
    cache = tmp_path / ".eval_cache"
    cached = set(cache.iterdir())

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "posx",
            "eval",
            str(run),
            "--lengths",
            "2048,4096,8192,16384",
            "eval.tokens=65536",
            "--no-progress",
        ],
        cwd=REPO,
        env={**os.environ, "POSX_DEBUG": "0"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A suite started in the background (`make test-slow &`, nohup) runs with SIGINT ignored,
        # which a child inherits: Python then never raises KeyboardInterrupt. A terminal's
        # Ctrl-C, what this test stands for, reaches a process with the default handler.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 120
    while set(cache.iterdir()) == cached and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)  # the first new eval set in the cache: evaluation has begun
    assert proc.poll() is None, "eval finished before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip() == (
        f"posx: interrupted while evaluating {run.name}, no rows written for it; "
        "0 of 1 run(s) were evaluated"
    )
    assert {name: (run / name).read_bytes() for name in tables} == tables
    assert not list(run.glob(".*.tmp"))


def interrupt_at(monkeypatch, step: int, times: int, signum: int = signal.SIGINT) -> None:
    """Sends this process ``times`` SIGINTs (or ``signum``) while the loss of ``step`` is
    computed (as a user pressing Ctrl-C; the handler runs at once, in the main thread, as in a
    terminal)."""
    import posx.training.loop

    real, calls = posx.training.loop.masked_loss, []

    def loss_then_interrupt(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        if len(calls) == step:
            for _ in range(times):
                os.kill(os.getpid(), signum)
        return real(*args, **kwargs)

    monkeypatch.setattr(posx.training.loop, "masked_loss", loss_then_interrupt)


def test_ctrl_c_during_training_checkpoints_and_exits_130(
    cli, tiny_overrides, tmp_path, monkeypatch
):
    interrupt_at(monkeypatch, step=7, times=1)
    out = cli("train", *tiny_overrides)
    (run,) = [p.parent for p in tmp_path.rglob("run.json")]
    assert out.returncode == 130, out.stderr
    assert out.stderr.strip() == (
        f"posx: interrupted at step 7; checkpoint saved; run: posx resume {run}"
    )
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "interrupted" and info["step"] == 7
    assert json.loads((run / "checkpoint" / "trainer.json").read_text())["step"] == 7
    assert not (run / "eval.csv").exists()  # resumable: test_resume.py resumes bit-identically


def test_sigterm_during_training_checkpoints_like_ctrl_c(
    cli, tiny_overrides, tmp_path, monkeypatch
):
    """SLURM sends SIGTERM before it kills a job: the run saves a checkpoint and can resume."""
    interrupt_at(monkeypatch, step=4, times=1, signum=signal.SIGTERM)
    out = cli("train", *tiny_overrides)
    (run,) = [p.parent for p in tmp_path.rglob("run.json")]
    assert out.returncode == 130, out.stderr
    assert out.stderr.strip() == (
        f"posx: interrupted at step 4; checkpoint saved; run: posx resume {run}"
    )
    assert json.loads((run / "checkpoint" / "trainer.json").read_text())["step"] == 4


def test_second_ctrl_c_stops_at_once_and_keeps_the_last_checkpoint(
    cli, tiny_overrides, tmp_path, monkeypatch
):
    interrupt_at(monkeypatch, step=13, times=2)
    out = cli("train", *tiny_overrides, "train.checkpoint_every=5")
    (run,) = [p.parent for p in tmp_path.rglob("run.json")]
    assert out.returncode == 130, out.stderr
    message = (
        f"stopped at once by a second Ctrl-C; resume from the last checkpoint: posx resume {run}"
    )
    assert out.stderr.strip() == f"posx: {message}"
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "failed" and info["error"] == message
    assert json.loads((run / "checkpoint" / "trainer.json").read_text())["step"] == 10
    assert not list(run.glob(".checkpoint.*"))
