"""Precision settings: what each resolves to, and one training step in each, on the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from posx.runtime.precision import (
    PRECISIONS,
    autocast_context,
    grad_scaler,
    precision_name,
    resolve_precision,
)

CPU, CUDA, MPS = torch.device("cpu"), torch.device("cuda"), torch.device("mps")


@pytest.mark.parametrize(
    ("precision", "device", "dtype"),
    [
        ("auto", CUDA, torch.bfloat16),
        ("auto", CPU, None),
        ("auto", MPS, None),
        ("fp32", CUDA, None),
        ("bf16", CPU, torch.bfloat16),
        ("fp16", CPU, torch.float16),
        ("fp16", CUDA, torch.float16),
    ],
)
def test_resolve_precision(precision, device, dtype):
    assert resolve_precision(precision, device) == dtype


def test_precision_names_say_what_ran():
    assert precision_name("auto", CUDA) == "bf16"
    assert precision_name("auto", CPU) == "fp32"
    assert [precision_name(p, CPU) for p in PRECISIONS[1:]] == ["fp32", "bf16", "fp16"]


def test_unknown_precision_is_one_clear_line():
    with pytest.raises(ValueError, match=r"^precision must be one of auto, fp32, bf16, fp16; got"):
        resolve_precision("float8", CPU)


@pytest.mark.parametrize(
    ("precision", "dtype"),
    [
        ("fp32", torch.float32),
        ("auto", torch.float32),
        ("bf16", torch.bfloat16),
        ("fp16", torch.float16),
    ],
)
def test_autocast_context_applies_on_the_cpu(precision, dtype):
    layer = torch.nn.Linear(4, 4)
    with autocast_context(CPU, precision):
        assert layer(torch.randn(2, 4)).dtype == dtype


def test_only_fp16_scales_gradients():
    assert grad_scaler(CPU, "fp16").is_enabled()
    assert not any(grad_scaler(CPU, p).is_enabled() for p in ("auto", "fp32", "bf16"))


def train_step(model, tokens, precision: str, fused: bool) -> tuple[float, list[torch.Tensor]]:
    """One step as a GPU run takes it (autocast, scaler, fused AdamW), on the CPU."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=fused)
    scaler = grad_scaler(CPU, precision)
    with autocast_context(CPU, precision):
        logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach().item(), [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_mixed_precision_step_matches_fp32(precision, make_tiny_model):
    """The default encoding (RoPE, whose bf16 rotation once crashed) at b > 1, h > 1."""
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(50, (2, 33), generator=gen)
    results = {}
    for p in ("fp32", precision):
        torch.manual_seed(0)
        model = make_tiny_model("rope", "model.n_layers=1", "train.length=32").train()
        before = [q.detach().clone() for q in model.parameters()]
        results[p] = (*train_step(model, tokens, p, fused=True), before)
    loss32, after32, before = results["fp32"]
    loss, after, _ = results[precision]
    assert loss == pytest.approx(loss32, rel=2e-2)
    for a, a32, b in zip(after, after32, before, strict=True):
        assert torch.isfinite(a).all()
        # AdamW's first step moves every weight by ~lr in its gradient's sign: the same signs.
        moved, moved32 = a - b, a32 - b
        agree = (moved.sign() == moved32.sign()) | (moved32.abs() < 1e-6)
        assert agree.float().mean() > 0.9


def test_fused_adamw_runs_on_the_cpu_and_equals_foreach(make_tiny_model):
    """The fused optimizer a CUDA run uses is available on the CPU too: same step."""
    tokens = torch.randint(50, (2, 17), generator=torch.Generator().manual_seed(1))
    params = []
    for fused in (True, False):
        torch.manual_seed(0)
        model = make_tiny_model("alibi", "model.n_layers=1").train()
        params.append(train_step(model, tokens, "fp32", fused=fused)[1])
    for a, b in zip(*params, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
