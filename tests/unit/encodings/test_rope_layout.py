"""RoPE and xPos at realistic shapes in every dtype: the low-precision (real-form) rotation must
keep the ``[b, h, s, d_h]`` layout and agree with the float32 (complex) rotation.

The golden tests use ``[1, 1, 1, d]``, where a misplaced head axis broadcasts silently; here
``b``, ``h`` and ``s`` all differ, so a wrong axis either raises or changes the shape.
"""

from __future__ import annotations

import pytest
import torch

from posx.encodings.rope import RoPE
from posx.encodings.rope_scaling import SCALING_TYPES
from posx.encodings.xpos import XPos

TRAIN_LEN = 16


def make(kind: str, head_dim: int) -> RoPE:
    if kind == "xpos":
        return XPos(head_dim)
    scaling = None if kind == "none" else {"type": kind, "factor": 4.0}
    if kind == "longrope":  # per-dimension factors, rising from 1 to the scale
        scaling["factors"] = torch.linspace(1.0, 4.0, head_dim // 2).tolist()
    return RoPE(head_dim, scaling=scaling, train_length=TRAIN_LEN)


def positions(kind: str, b: int, s: int) -> torch.Tensor:
    if kind == "shared":
        return torch.arange(s)
    if kind == "per_row":
        return torch.stack([torch.arange(s) + 7 * r for r in range(b)])
    return torch.arange(s) * 0.75  # float positions: computed, not looked up


def qk(shape: tuple[int, ...], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)


@pytest.mark.parametrize("shape", [(2, 3, 512, 16), (1, 1, 64, 64)])
def test_bf16_rotation_keeps_the_shape_reported_in_issue_17(shape):
    """Before the fix: ``[2, 3, 512, 16]`` raised (size 3 vs 512) and ``[1, 1, 64, 64]`` came
    back as ``[1, 64, 64, 64]``."""
    q, k = qk(shape)
    pos = torch.arange(shape[2])
    qr, kr = RoPE(shape[-1]).rotate(q.bfloat16(), k.bfloat16(), pos, pos)
    assert qr.shape == kr.shape == shape
    assert qr.dtype == kr.dtype == torch.bfloat16


@pytest.mark.parametrize("pos_kind", ["shared", "per_row", "float"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", [*SCALING_TYPES, "xpos"])
def test_low_precision_rotation_matches_float32(kind, dtype, pos_kind):
    shape = (2, 3, 64, 16)
    enc = make(kind, shape[-1])
    q, k = qk(shape, seed=1)
    pos = positions(pos_kind, shape[0], shape[2])
    ref_q, ref_k = enc.rotate(q, k, pos, pos)
    got_q, got_k = enc.rotate(q.to(dtype), k.to(dtype), pos, pos)
    for got, ref in ((got_q, ref_q), (got_k, ref_k)):
        assert got.shape == ref.shape and got.dtype == dtype
        # bf16 keeps 8 bits of mantissa: ~1% relative error; a misplaced axis gives ~140%.
        rel = (got.float() - ref).norm() / ref.norm()
        assert rel < 2e-2, f"{kind} {dtype} {pos_kind}: relative error {float(rel):.3g}"


@pytest.mark.parametrize("rotary_fraction", [1.0, 0.5])
def test_low_precision_partial_rotation_matches_float32(rotary_fraction):
    enc = RoPE(32, rotary_fraction=rotary_fraction)
    q, k = qk((2, 4, 64, 32), seed=2)
    pos = positions("per_row", 2, 64)
    ref, _ = enc.rotate(q, k, pos, pos)
    got, _ = enc.rotate(q.bfloat16(), k.bfloat16(), pos, pos)
    assert got.shape == ref.shape
    assert (got.float() - ref).norm() / ref.norm() < 2e-2


def test_rerope_attention_in_bf16_matches_float32():
    """ReRoPE's own attention rotates q twice (near and at the window) in the input dtype."""
    enc = make("rerope", 16)
    q, k = qk((2, 3, 64, 16), seed=3)
    v = torch.randn(2, 3, 64, 16, generator=torch.Generator().manual_seed(4))
    pos = torch.arange(64)
    ref = enc.attend(q, k, v, pos, pos)
    got = enc.attend(q.bfloat16(), k.bfloat16(), v.bfloat16(), pos, pos)
    assert got.shape == ref.shape
    assert (got.float() - ref).norm() / ref.norm() < 2e-2
