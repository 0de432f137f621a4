"""ReRoPE's ``attend`` through the shared blocked routine equals its former own block loop.

``reference_attend`` is the body ``RoPE.attend`` had before it moved onto
:func:`posx.kernels.blocked.blocked_attend` (its own 256-query blocks, in forward order, its own
``masked_fill`` future mask). The new one must give the same outputs and gradients, on the
explicit path (a gradient is wanted) and on the fused far-key path (none is), at any length,
block size and kind of positions.
"""

from __future__ import annotations

import math

import pytest
import torch

from posx.encodings.base import as_float, relative_distance
from posx.encodings.rope import RoPE
from posx.kernels import blocked
from posx.kernels import budget as budgets

D, H = 8, 2


def reference_attend(
    enc: RoPE, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos, k_pos, block: int = 256
) -> torch.Tensor:
    """The former ``RoPE.attend`` (ReRoPE), verbatim but for the block size argument."""
    w = enc.scaling.rerope_window
    q_near, k_near = enc.rotate(q, k, q_pos, k_pos)
    q_far = enc.turn(q, *enc.cos_sin(torch.tensor([w], device=q.device)))
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = q.shape[-2]
    outputs = []
    for i0 in range(0, s, block):
        i1 = min(s, i0 + block)
        near = q_near[..., i0:i1, :] @ k_near[..., :i1, :].transpose(-1, -2)
        far = q_far[..., i0:i1, :] @ k[..., :i1, :].transpose(-1, -2)
        dist = relative_distance(as_float(q_pos[..., i0:i1]), as_float(k_pos[..., :i1]))
        if dist.dim() == 3:  # [b, sq, sk] -> [b, 1, sq, sk]
            dist = dist.unsqueeze(1)
        scores = torch.where(dist < w, near, far).float() * scale
        rows = torch.arange(i0, i1, device=q.device).unsqueeze(-1)
        future = torch.arange(i1, device=q.device) > rows
        scores = scores.masked_fill(future, float("-inf"))
        outputs.append(scores.softmax(dim=-1).to(v.dtype) @ v[..., :i1, :])
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-2)


def rerope(window: int = 5) -> RoPE:
    return RoPE(D, scaling={"type": "rerope", "window": window}, train_length=16)


def positions(kind: str, s: int, b: int = 2) -> torch.Tensor:
    gen = torch.Generator().manual_seed(s)
    if kind == "arange":
        return torch.arange(s)
    if kind == "offset":  # a later window of a long sequence
        return torch.arange(s) + 1000
    if kind == "gaps":  # increasing, some gaps wider than the window
        return torch.randint(1, 9, (s,), generator=gen).cumsum(0)
    if kind == "per_row":  # [b, s]: each row its own positions
        return torch.stack(
            [torch.arange(s) + 3 * r for r in range(b - 1)]
            + [torch.randint(1, 4, (s,), generator=gen).cumsum(0)]
        )
    if kind == "float":  # interpolated positions
        return torch.arange(s) * 0.75
    return torch.randperm(s, generator=gen) * 2  # "shuffled": not monotonic


def qkv(s: int, b: int = 2, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(100 + s)
    return tuple(torch.randn(b, H, s, D, generator=gen, dtype=dtype) for _ in range(3))


LENGTHS = [1, 4, 5, 13, 37, 300]  # shorter than the window, several blocks, > 256
KINDS = ["arange", "offset", "gaps", "per_row", "float", "shuffled"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("s", LENGTHS)
def test_attend_equals_the_former_loop(s, kind):
    enc, pos = rerope(), positions(kind, s)
    q, k, v = qkv(s)
    with torch.no_grad():
        want = reference_attend(enc, q, k, v, pos, pos)
        fused = enc.attend(q, k, v, pos, pos)  # far keys through the fused kernel
    with torch.enable_grad():
        explicit = enc.attend(q.clone().requires_grad_(), k, v, pos, pos).detach()
    torch.testing.assert_close(fused, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(explicit, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("block", [1, 3, 4, 7, 64])
@pytest.mark.parametrize("kind", ["arange", "per_row", "shuffled"])
def test_any_block_size_equals_the_former_loop(block, kind, monkeypatch):
    s = 37  # no block size here divides it
    enc, pos = rerope(window=3), positions(kind, s)
    q, k, v = qkv(s)
    want = reference_attend(enc, q, k, v, pos, pos, block=block)
    monkeypatch.setattr(enc, "rerope_block_size", block)
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            got = enc.attend(q.clone().requires_grad_(grad), k, v, pos, pos).detach()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=f"{grad=}")


def test_the_element_budget_shrinks_blocks_without_changing_the_result(monkeypatch):
    s, b = 45, 2
    enc, pos = rerope(window=4), positions("arange", s)
    q, k, v = qkv(s, b)
    want = reference_attend(enc, q, k, v, pos, pos)
    monkeypatch.setattr(budgets, "ATTEND_BLOCK_ELEMENTS", b * H * s * 6)  # 6 queries a block
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            got = enc.attend(q.clone().requires_grad_(grad), k, v, pos, pos).detach()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=f"{grad=}")


@pytest.mark.parametrize("kind", ["arange", "per_row", "shuffled"])
@pytest.mark.parametrize("s", [5, 37, 300])
def test_gradients_equal_the_former_loop(s, kind):
    enc, pos = rerope(), positions(kind, s)
    inputs = qkv(s)
    old = [t.clone().requires_grad_() for t in inputs]
    new = [t.clone().requires_grad_() for t in inputs]
    out_old = reference_attend(enc, *old, pos, pos)
    out_new = enc.attend(*new, pos, pos)
    torch.testing.assert_close(out_new, out_old, rtol=1e-5, atol=1e-6)
    grad_out = torch.randn(out_old.shape, generator=torch.Generator().manual_seed(5))
    out_old.backward(grad_out)
    out_new.backward(grad_out)
    for name, a, b in zip("qkv", old, new, strict=True):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-5, msg=f"d{name}")


def test_float64_inputs_keep_their_dtype_and_values():
    s = 37
    enc, pos = rerope(window=4), positions("arange", s)
    q, k, v = qkv(s, dtype=torch.float64)
    with torch.no_grad():
        want = reference_attend(enc, q, k, v, pos, pos)
        got = enc.attend(q, k, v, pos, pos)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_a_window_of_one_sees_every_earlier_key_at_distance_one():
    s = 13
    enc, pos = rerope(window=1), positions("arange", s)
    q, k, v = qkv(s)
    with torch.no_grad():
        torch.testing.assert_close(
            enc.attend(q, k, v, pos, pos), reference_attend(enc, q, k, v, pos, pos)
        )


def test_far_keys_take_the_fused_kernel_without_a_gradient(monkeypatch):
    calls = []
    fused = blocked.flash_lse
    monkeypatch.setattr(blocked, "flash_lse", lambda *a: calls.append(a[1].shape[-2]) or fused(*a))
    s = 300
    enc, pos = rerope(window=5), positions("arange", s)
    q, k, v = qkv(s)
    enc.attend(q.clone().requires_grad_(), k, v, pos, pos)
    assert calls == []  # a gradient is wanted: every key on the explicit path
    with torch.no_grad():
        enc.attend(q, k, v, pos, pos)
    assert calls and max(calls) > 0


def test_bfloat16_inputs_match_the_former_loop_to_bfloat16_precision():
    s = 300
    enc, pos = rerope(window=4), positions("arange", s)
    q, k, v = qkv(s, dtype=torch.bfloat16)
    with torch.no_grad():
        want = reference_attend(enc, q, k, v, pos, pos)
        got = enc.attend(q, k, v, pos, pos)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=1e-2)
