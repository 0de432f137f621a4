"""RoPE's fused rotation (issue 47): ``turn_pairs``, the one expression compiled on CUDA, equals
the eager rotation on the CPU (outputs and gradients, eager here, compiled in a slow test); the
model with ``fused_rotation`` equals the default; a compile failure falls back once, saying so."""

from __future__ import annotations

import warnings

import pytest
import torch

from posx.config.build import build_model
from posx.config.compose import compose
from posx.encodings.rope import RoPE
from posx.kernels import rotary
from posx.kernels.rotary import turn_pairs

B, H, S, DH = 2, 3, 12, 8
SCALINGS = [None, {"type": "yarn", "factor": 4.0}, {"type": "dynamic_ntk", "factor": 2.0}]


def qk(dtype: torch.dtype, length: int = S) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q and k as the model makes them (strided views of one fused qkv leaf), and the leaf."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(B, length, 3 * H * DH, generator=gen).to(dtype).requires_grad_()
    q, k, _ = x.view(B, length, 3, H, DH).permute(2, 0, 3, 1, 4)
    return x, q, k


def rotated(enc: RoPE, dtype: torch.dtype, pos: torch.Tensor, fused: bool):
    """Rotated q, k and the leaf's gradient under fixed incoming gradients."""
    x, q, k = qk(dtype, pos.shape[-1])
    enc.fused_rotation = fused
    qr, kr = enc.rotate(q, k, pos, pos)
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(qr.shape, generator=gen).to(dtype) for _ in range(2)]
    torch.autograd.backward((qr, kr), grads)
    return qr.detach(), kr.detach(), x.grad


@pytest.fixture
def fused_on_cpu(monkeypatch):
    """The fused route on the CPU, running :func:`turn_pairs` itself (the compiled function's
    code, uncompiled): every line of the route but Inductor's lowering."""
    monkeypatch.setattr(rotary, "FUSED_DEVICES", ("cpu",))
    monkeypatch.setattr(rotary, "compiled_turn", lambda: turn_pairs)
    monkeypatch.setattr(rotary, "_FUSED_FAILED", [])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fraction", [1.0, 0.5])
@pytest.mark.parametrize("scaling", SCALINGS)
@pytest.mark.parametrize("per_row", [False, True])
def test_fused_rotation_equals_the_eager_one(fused_on_cpu, dtype, fraction, scaling, per_row):
    """Outputs and gradients of q and k (the leaf's), strided views, partial rotary, the
    attention scale (yarn), dynamic NTK, per-row positions, against Turn's complex multiply."""
    enc = RoPE(DH, rotary_fraction=fraction, scaling=scaling, train_length=8)
    pos = torch.arange(S) if not per_row else torch.stack((torch.arange(S), torch.arange(S) + 5))
    expected = rotated(enc, dtype, pos, fused=False)
    got = rotated(enc, dtype, pos, fused=True)
    tol = {"atol": 1e-6, "rtol": 1e-6} if dtype == torch.float32 else {"atol": 1e-12, "rtol": 0}
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, **tol)


def test_fused_bf16_rotation_rounds_once(fused_on_cpu):
    """bf16 (autocast's dtype on CUDA): the eager route rounds the rotation and each product to
    bf16, the fused one computes in float32 and rounds once; both near float64's rotation, the
    fused one nearer."""
    enc = RoPE(DH, scaling={"type": "yarn", "factor": 4.0}, train_length=8)
    pos = torch.arange(S)
    exact = rotated(enc, torch.float64, pos, fused=False)
    eager = rotated(enc, torch.bfloat16, pos, fused=False)
    fused = rotated(enc, torch.bfloat16, pos, fused=True)
    _, q64, _ = qk(torch.float64)
    _, q16, _ = qk(torch.bfloat16)
    inputs = (q16.double() - q64).abs().max()  # the bf16 inputs' own rounding, carried along
    for i in range(2):  # q, k
        err_eager = (eager[i].double() - exact[i]).abs().max()
        err_fused = (fused[i].double() - exact[i]).abs().max()
        assert err_fused <= err_eager
        assert err_fused <= inputs * 4 + exact[i].abs().max() * 2**-8


@pytest.mark.parametrize("name", ["rope", "rope_yarn"])
def test_the_model_with_the_fused_rotation_equals_the_default(fused_on_cpu, name):
    """Logits and every parameter's gradient, training at 16 tokens and evaluating at 37."""
    overrides = ["encoding=rope", "model=tiny", "train.length=16"]
    if name == "rope_yarn":
        overrides += ["encoding.scaling.type=yarn", "encoding.scaling.factor=2"]
    tokens = torch.arange(37).remainder(40).unsqueeze(0).repeat(2, 1)
    results = []
    for fused in (False, True):
        torch.manual_seed(0)
        model = build_model(compose(overrides), vocab_size=40)
        model.encoding.fused_rotation = fused
        model(tokens[:, :16]).square().mean().backward()
        with torch.no_grad():
            logits = model.eval()(tokens)
        results.append([logits, *(p.grad for p in model.parameters() if p.grad is not None)])
    for g, e in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)


def test_a_compile_failure_falls_back_once_with_a_warning(monkeypatch):
    """The compiler fails: one warning naming the error, the eager rotation's result, and the
    fused route is not tried again in the process."""
    calls = []

    def broken() -> object:
        def turn(*args: object) -> torch.Tensor:
            calls.append(1)
            raise RuntimeError("no working C++ compiler found\nsecond line")

        return turn

    monkeypatch.setattr(rotary, "FUSED_DEVICES", ("cpu",))
    monkeypatch.setattr(rotary, "compiled_turn", broken)
    monkeypatch.setattr(rotary, "_FUSED_FAILED", [])
    enc = RoPE(DH)
    pos = torch.arange(S)
    expected = rotated(enc, torch.float32, pos, fused=False)
    with pytest.warns(UserWarning, match="fused RoPE rotation failed to compile") as caught:
        got = rotated(enc, torch.float32, pos, fused=True)
    assert len(caught) == 1 and "RuntimeError: no working C++ compiler found);" in str(
        caught[0].message
    )
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        again = rotated(enc, torch.float32, pos, fused=True)
    torch.testing.assert_close(again[0], expected[0])
    assert len(calls) == 1 and not rotary.fused_available(torch.device("cpu"))


def test_the_fused_route_is_off_by_default_and_cuda_only():
    assert RoPE.fused_rotation is False
    assert rotary.FUSED_DEVICES == ("cuda",)
    assert not rotary.fused_available(torch.device("cpu"))


def eager_pairs(enc: RoPE, dtype: torch.dtype, pos: torch.Tensor):
    """:func:`turn_pairs` uncompiled on the same inputs, with its gradients."""
    x, q, k = qk(dtype, pos.shape[-1])
    cos, sin = (t.unsqueeze(0) for t in enc.cos_sin(pos))
    qr, kr = (turn_pairs(t, cos, sin, enc.rot_dim, enc.attn_scale) for t in (q, k))
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(qr.shape, generator=gen).to(dtype) for _ in range(2)]
    torch.autograd.backward((qr, kr), grads)
    return qr.detach(), kr.detach(), x.grad


@pytest.mark.slow  # Inductor compiles the CPU kernels (forward and backward)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_compiled_rotation_equals_the_eager_one(monkeypatch, dtype):
    """torch.compile(turn_pairs, dynamic=True) on the CPU at two lengths, partial rotary and
    yarn's scale: outputs and gradients equal the eager route's (float32) or turn_pairs'
    uncompiled (bf16, rounded once either way)."""
    monkeypatch.setattr(rotary, "FUSED_DEVICES", ("cpu",))
    monkeypatch.setattr(rotary, "_FUSED_FAILED", [])
    rotary.compiled_turn.cache_clear()
    enc = RoPE(DH, rotary_fraction=0.5, scaling={"type": "yarn", "factor": 4.0}, train_length=8)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for length in (S, S - 3):
                pos = torch.arange(length)
                got = rotated(enc, dtype, pos, fused=True)
                if dtype == torch.float32:
                    expected = rotated(enc, dtype, pos, fused=False)
                else:
                    expected = eager_pairs(enc, dtype, pos)
                for g, e in zip(got, expected, strict=True):
                    torch.testing.assert_close(g, e, atol=1e-6, rtol=1e-6)
        assert not [w for w in caught if "fused RoPE" in str(w.message)]  # no fallback
    finally:
        rotary.compiled_turn.cache_clear()
