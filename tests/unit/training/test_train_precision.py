"""The mixed-precision, fused-AdamW and compiled training paths a GPU run takes, run on the CPU
through the real training loop (slowly: tiny shapes), for every encoding yaml and every RoPE
scaling type (issue 17)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from posx.config.compose import CONFIG_DIR, compose
from posx.evaluation.sweep import evaluate_run
from posx.saved import SavedRun
from posx.training.loop import train

ENCODINGS = sorted(p.stem for p in (CONFIG_DIR / "encoding").glob("*.yaml"))
SCALINGS = ["linear", "ntk", "dynamic_ntk", "yarn", "llama3", "rerope"]
TINY = [
    "task=copy",
    "model.d_model=32",
    "model.n_heads=2",
    "model.n_layers=2",
    "model.d_ff=64",
    "train.length=16",
    "train.batch_size=4",
    "train.steps=5",
    "train.warmup_steps=1",
    "train.log_every=1",
    "train.progress=false",
    "train.device=cpu",
]
NAMES = {"encoding": "x", "task": "copy", "model": "tiny"}


def cases() -> list[list[str]]:
    out = [[f"encoding={name}"] for name in ENCODINGS]
    # a scaling type is chosen at eval time, but a run may train with one too
    out += [["encoding=rope", f"encoding.scaling.type={s}", "encoding.scaling.factor=2"]
            for s in SCALINGS]  # fmt: skip
    return out


@pytest.mark.parametrize("overrides", cases(), ids=lambda o: "-".join(x.split("=")[1] for x in o))
def test_bf16_training_runs_on_cpu(overrides: list[str], tmp_path: Path):
    cfg = compose([*TINY, *overrides, "train.precision=bf16", f"root={tmp_path}"])
    result = train(cfg, tmp_path, NAMES)
    losses = pd.read_csv(tmp_path / "metrics.csv")["loss"]
    assert len(losses) == 5 and all(math.isfinite(x) for x in losses)
    assert result.summary["final_loss"] == losses.iloc[-1]


def test_fp16_with_a_gradient_scaler_and_fused_adamw_track_fp32(tmp_path: Path):
    """fp16 (scaled gradients, unscaled before clipping) and fused AdamW on the CPU: the same
    code a CUDA run takes; the losses follow the fp32 run's closely."""
    base = [*TINY, "encoding=alibi", "train.steps=8"]
    ref = train(compose([*base, "train.precision=fp32"]), tmp_path / "fp32", NAMES)
    cfg = compose([*base, "train.precision=fp16", "train.fused_adamw=true"])
    got = train(cfg, tmp_path / "fp16", NAMES)
    assert isinstance(got.model, torch.nn.Module)
    assert abs(got.summary["final_loss"] - ref.summary["final_loss"]) < 0.05
    fused = train(compose([*base, "train.fused_adamw=true"]), tmp_path / "fused", NAMES)
    assert fused.summary["final_loss"] == pytest.approx(ref.summary["final_loss"], abs=1e-4)


def test_eval_rows_record_the_precision_that_ran(tmp_path: Path):
    cfg = compose([*TINY, "encoding=rope", "eval.lengths=[16]", "eval.tokens=64"])
    result = train(cfg, tmp_path, NAMES)
    rows = evaluate_run(SavedRun(tmp_path), [16], model=result.model, task=result.task, cfg=cfg)
    assert rows[0]["precision"] == "fp32"  # auto on the CPU
    cfg.eval.precision = "bf16"
    rows_bf16 = evaluate_run(
        SavedRun(tmp_path), [16], model=result.model, task=result.task, cfg=cfg
    )
    assert rows_bf16[0]["precision"] == "bf16"
    assert rows_bf16[0]["loss"] == pytest.approx(rows[0]["loss"], rel=0.02)
    assert rows_bf16[0]["loss"] != rows[0]["loss"]  # bf16 really ran


@pytest.mark.parametrize(
    "encoding",
    [pytest.param("nope", marks=pytest.mark.slow), pytest.param("rope", marks=pytest.mark.slow),
     "alibi"],
)  # fmt: skip
def test_compiled_training_matches_eager(encoding: str, tmp_path: Path):
    """train.compile=true runs torch.compile'd forward and backward (CPU inductor here).

    alibi (its bias memo breaks the graph) stays in the default suite: with q, k and v as views
    of one tensor among the outputs of the graph before the break, AOTAutograd replayed them
    with garbage sizes (`shape '[94006875724997, ...]' is invalid`) and training crashed."""
    base = [*TINY, f"encoding={encoding}"]
    eager = train(compose(base), tmp_path / "eager", NAMES)
    compiled = train(compose([*base, "train.compile=true"]), tmp_path / "compiled", NAMES)
    assert compiled.summary["final_loss"] == pytest.approx(eager.summary["final_loss"], abs=1e-3)


def test_run_json_records_the_precision_auto_resolved_to(tmp_path: Path):
    """On the CPU ``auto`` is fp32 for training and evaluation; run.json says so, and its
    fingerprint is the one a report computes from the run directory."""
    cfg = compose([*TINY, "encoding=rope", "eval.lengths=[16]", "eval.tokens=64"])
    train(cfg, tmp_path, NAMES)
    info = json.loads((tmp_path / "run.json").read_text())
    assert (info["train_precision"], info["eval_precision"]) == ("fp32", "fp32")
    assert info["fingerprint"] == SavedRun(tmp_path).fingerprint_with(cfg)
