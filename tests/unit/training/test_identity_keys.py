"""Settings a run's identity leaves out because they do not change its numbers
(``NOT_IDENTITY`` in posx/config/fingerprint.py names these tests): a run trained and evaluated
with either value has the same losses, so runs that differ only there are replicates."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

from posx.config.compose import compose
from posx.evaluation.sweep import evaluate_run
from posx.kernels.flex.attention import FLEX_AVAILABLE
from posx.model import attention
from posx.saved import SavedRun
from posx.training.loop import train

TINY = [
    "task=copy",
    "model.d_model=32",
    "model.n_heads=2",
    "model.n_layers=2",
    "model.d_ff=64",
    "train.length=16",
    "train.batch_size=4",
    "train.steps=6",
    "train.warmup_steps=1",
    "train.log_every=1",
    "train.progress=false",
    "train.device=cpu",
    "eval.tokens=64",
]
NAMES = {"encoding": "x", "task": "copy", "model": "tiny"}
LENGTHS = [16, 48]  # the training length and 3x: the blocked kernel splits the longer one


def numbers(tmp_path: Path, name: str, *overrides: str) -> dict[str, list[float]]:
    """Training losses and gradient norms, eval losses, and the final weights of a run."""
    cfg = compose([*TINY, *overrides])
    result = train(cfg, tmp_path / name, NAMES)
    rows = evaluate_run(
        SavedRun(tmp_path / name), LENGTHS, model=result.model, task=result.task, cfg=cfg
    )
    metrics = pd.read_csv(tmp_path / name / "metrics.csv")
    weights = torch.cat([p.detach().flatten() for p in result.model.parameters()])
    return {
        "loss": list(metrics["loss"]),
        "grad_norm": list(metrics["grad_norm"]),
        "eval_loss": [r["loss"] for r in rows],
        "weights": weights.tolist(),
    }


def assert_same(a: dict[str, list[float]], b: dict[str, list[float]], tol: float) -> None:
    """Losses and eval losses within ``tol``; weights within a third of one AdamW step (lr
    3e-3): AdamW normalises each update, so a near-zero gradient that rounds differently can
    move its weight by a fraction of a step even though every loss agrees."""
    for key in ("loss", "grad_norm", "eval_loss"):
        assert b[key] == pytest.approx(a[key], rel=tol, abs=tol), key
    assert b["weights"] == pytest.approx(a["weights"], abs=1e-3)


def test_max_memory_does_not_change_a_run(tmp_path: Path):
    """``train.max_memory`` is a limit checked before training starts: nothing else reads it."""
    unlimited = numbers(tmp_path, "none", "encoding=alibi")
    limited = numbers(tmp_path, "64G", "encoding=alibi", "train.max_memory=64G")
    assert limited == unlimited  # bit for bit


@pytest.mark.parametrize("encoding", ["alibi", "fire"])
def test_attn_block_size_does_not_change_a_run(tmp_path: Path, encoding: str):
    """The blocked bias kernel computes each query block on its own: blocks of 3 and of 256
    queries give the same training and evaluation (to float32 rounding)."""
    whole = numbers(tmp_path, "256", f"encoding={encoding}")
    blocks = numbers(tmp_path, "3", f"encoding={encoding}", "model.attn_block_size=3")
    assert_same(whole, blocks, 1e-4)


@pytest.mark.skipif(not FLEX_AVAILABLE, reason="torch without FlexAttention")
@pytest.mark.parametrize("encoding", ["alibi", "t5"])
def test_attention_kernel_does_not_change_a_run(tmp_path: Path, encoding: str, monkeypatch):
    """``model.attention_kernel=flex`` evaluates with FlexAttention (on the CPU too; its training
    steps there take the blocked kernel, as FlexAttention has no CPU backward): the numbers
    equal the blocked kernel's (``auto`` is one of these two, by device)."""
    flex_calls = []
    flex = attention.flex_bias_attention
    monkeypatch.setattr(
        attention, "flex_bias_attention", lambda *a, **k: flex_calls.append(1) or flex(*a, **k)
    )
    blocked = numbers(tmp_path, "blocked", f"encoding={encoding}", "model.attention_kernel=blocked")
    assert not flex_calls
    flexed = numbers(tmp_path, "flex", f"encoding={encoding}", "model.attention_kernel=flex")
    assert flex_calls  # FlexAttention really ran
    assert_same(blocked, flexed, 1e-4)
