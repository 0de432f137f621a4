"""Blocked attention of every encoding that computes its own (``attend``): any block size, the
fused far-key path and the explicit one give the unblocked result; blocks stay in budget.

The encodings are found by globbing configs/encoding/*.yaml and keeping those that declare
``attend``, so a new one is covered without touching this file.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from posx.config.build import build_encoding
from posx.config.compose import CONFIG_DIR
from posx.encodings.base import PositionalEncoding
from posx.kernels import blocked
from posx.kernels import budget as budgets
from posx.kernels.blocked import blocked_attend, future_bias, mask_future_
from posx.kernels.relative import (
    consecutive_positions,
    gather_relative,
    relative_shift,
    relative_shift_keys,
)
from tests.conftest import composed

B, H, S, D = 2, 4, 23, 8
DIMS = [f"model.d_model={H * D}", f"model.n_heads={H}", "model.n_layers=2", "train.length=8"]


def encoding_of(name: str, *overrides: str) -> PositionalEncoding:
    """Layer 1's encoding with parameters large enough to matter."""
    torch.manual_seed(0)
    enc = build_encoding(composed([f"encoding={name}", *DIMS, *overrides]))
    with torch.no_grad():
        for p in enc.parameters():
            p.normal_(std=0.5)
    return enc.for_layer(1)


def attend_encodings() -> list[str]:
    names = sorted(p.stem for p in (CONFIG_DIR / "encoding").glob("*.yaml"))
    return [n for n in names if encoding_of(n).has_attend]


ATTEND = attend_encodings()


def test_the_glob_finds_the_known_attend_encodings():
    assert {"shaw", "deberta", "cope", "transformer_xl"} <= set(ATTEND)


def positions(kind: str) -> torch.Tensor:
    gen = torch.Generator().manual_seed(3)
    if kind == "arange":
        return torch.arange(S)
    if kind == "gaps":  # increasing, some gaps wider than any clipping distance
        return torch.randint(1, 60, (S,), generator=gen).cumsum(0)
    if kind == "per_row":
        return torch.stack([torch.arange(S) * 40 + 7, torch.randint(1, 9, (S,), generator=gen)])
    if kind == "float":  # interpolated positions
        return torch.arange(S) * 37.25
    return torch.randperm(S, generator=gen) * 30  # "shuffled": not monotonic


KINDS = ["arange", "gaps", "per_row", "float", "shuffled"]


def qkv() -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(1)
    return tuple(torch.randn(B, H, S, D, generator=gen) for _ in range(3))


def run(enc: PositionalEncoding, pos: torch.Tensor, block: int, grad: bool) -> torch.Tensor:
    """``attend`` with ``block`` queries per block (by the element budget), through the explicit
    path (``grad``: q needs a gradient) or the fused far-key path (no gradient)."""
    q, k, v = qkv()
    budget = budgets.ATTEND_BLOCK_ELEMENTS
    try:
        budgets.ATTEND_BLOCK_ELEMENTS = block * B * H * S
        if grad:
            with torch.enable_grad():
                return enc.attend(q.requires_grad_(), k, v, pos, pos).detach()
        with torch.no_grad():
            return enc.attend(q, k, v, pos, pos)
    finally:
        budgets.ATTEND_BLOCK_ELEMENTS = budget


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ATTEND)
def test_every_block_size_and_both_paths_equal_the_unblocked_result(name, kind):
    enc, pos = encoding_of(name), positions(kind)
    whole = run(enc, pos, S, grad=True)
    # Shuffled positions give CoPE negative gaps, whose suffix sums cancel: a block's shorter
    # cumsum rounds differently (3.5e-5 seen).
    tol = 1e-4 if kind == "shuffled" else 2e-5
    for block in range(1, S + 1):  # most do not divide S
        for grad in (False, True):
            got = run(enc, pos, block, grad)
            torch.testing.assert_close(got, whole, atol=tol, rtol=tol, msg=f"{block=} {grad=}")


@pytest.mark.parametrize("name", ["shaw", "deberta"])
def test_far_keys_take_the_fused_kernel_without_a_gradient(name, monkeypatch):
    calls = []
    fused = blocked.flash_lse
    monkeypatch.setattr(blocked, "flash_lse", lambda *a: calls.append(a[1].shape[-2]) or fused(*a))
    enc, pos = encoding_of(name), positions("gaps")
    run(enc, pos, 4, grad=True)
    assert calls == []  # a gradient is wanted: the explicit path
    run(enc, pos, 4, grad=False)
    assert len(calls) >= S // 4 - 2 and max(calls) > 0  # most blocks had far keys


def test_no_block_exceeds_the_budget(monkeypatch):
    """One block's logits stay within ATTEND_BLOCK_ELEMENTS at any length: memory linear in s."""
    monkeypatch.setattr(budgets, "ATTEND_BLOCK_ELEMENTS", 1 * 2 * 4 * 50)  # 4 queries x 50 keys
    s, sizes = 50, []
    q, k, v = (torch.randn(1, 2, s, 8) for _ in range(3))

    def scores(i0: int, i1: int, j0: int) -> tuple[torch.Tensor, None]:
        logits = q[..., i0:i1, :] @ k[..., j0:i1, :].transpose(-1, -2) * 8**-0.5
        sizes.append(logits.numel())
        return logits, None

    got = blocked_attend(v, scores, block_size=256)
    assert max(sizes) <= 1 * 2 * 4 * 50 and len(sizes) == 13
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=True))


class LargestTensor(TorchDispatchMode):
    """Records the most elements of any tensor an op returns while active."""

    def __init__(self) -> None:
        super().__init__()
        self.most = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.most = max(self.most, t.numel())
        return out


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("name", ATTEND)
def test_no_tensor_has_an_s_by_s_footprint_per_head(name, grad, monkeypatch):
    """With a 16-query budget at 512 tokens, no op anywhere in ``attend`` (the SDPA math path
    included) returns a tensor as big as a quarter of the [b, h, s, s] scores."""
    s = 512
    monkeypatch.setattr(budgets, "ATTEND_BLOCK_ELEMENTS", 16 * B * H * s)
    monkeypatch.setattr(budgets, "SDPA_BLOCK_ELEMENTS", 16 * B * H * s)
    # DeBERTa's explicit path holds [b, h, 2k, keys] relative scores: linear in s, but at
    # 512 tokens the default k = 128 makes them half the size of the [s, s] scores.
    small_k = ["encoding.max_relative_positions=16"] if name == "deberta" else []
    enc, pos = encoding_of(name, *small_k), torch.arange(s)
    q, k, v = (torch.randn(B, H, s, D) for _ in range(3))
    with torch.set_grad_enabled(grad), LargestTensor() as seen:
        enc.attend(q.requires_grad_(grad), k, v, pos, pos)
    assert seen.most < B * H * s * s // 4


def test_far_keys_widen_blocks_at_long_lengths(monkeypatch):
    """With far keys a block's logits cover only its near band, so blocks are sized by the band,
    not by s: 16x fewer blocks for deberta at 4,096 tokens, same result (issue 18: 4,096
    blocks of 8 queries per layer at 32k made its memory vary between runs)."""
    s, calls = 4096, []
    # a gap in the positions: deberta's band (consecutive positions only) stays out of it
    enc, pos = encoding_of("deberta", "encoding.max_relative_positions=64"), torch.arange(s)
    pos[s // 2 :] += 7
    q, k, v = (torch.randn(1, H, s, D) for _ in range(3))
    fused = blocked.flash_lse
    monkeypatch.setattr(blocked, "flash_lse", lambda *a: calls.append(a[0].shape[-2]) or fused(*a))
    with torch.no_grad():
        got = enc.attend(q, k, v, pos, pos)
    assert calls and min(calls) == 256 and len(calls) <= s // 256, (len(calls), min(calls))
    with torch.enable_grad():  # the explicit path, blocks sized by s, is the reference
        want = enc.attend(q.requires_grad_(), k, v, pos, pos).detach()
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("bq,keys", [(1, 1), (1, 5), (3, 3), (4, 9), (8, 8)])
def test_relative_shift_is_the_gather_by_distance(bq, keys):
    """The strided view reads, for query r and key c, the column of distance keys - bq + r - c."""
    rel = torch.randn(2, 3, bq, keys + bq - 1)
    r, c = torch.arange(bq).unsqueeze(-1), torch.arange(keys)
    index = (bq - 1 - r + c).expand(bq, keys)
    torch.testing.assert_close(relative_shift(rel, keys), gather_relative(rel, index))
    with pytest.raises(ValueError, match="distances"):
        relative_shift(rel, keys + 1)


@pytest.mark.parametrize("bq,keys", [(1, 1), (1, 5), (3, 3), (4, 9), (8, 8), (9, 4)])
def test_relative_shift_keys_is_the_key_major_gather_by_distance(bq, keys):
    """Key-major, distances increasing: query r and key c read column keys - 1 + r - c of
    key c's row, already laid out as [query, key]."""
    rel = torch.randn(2, 3, keys, keys + bq - 1)
    r, c = torch.arange(bq).unsqueeze(-1), torch.arange(keys)
    index = (keys - 1 + r - c).expand(bq, keys).T  # per key row: the column of each query
    want = gather_relative(rel, index).transpose(-1, -2)
    torch.testing.assert_close(relative_shift_keys(rel, bq), want)
    with pytest.raises(ValueError, match="distances"):
        relative_shift_keys(rel, bq + 1)


def test_consecutive_positions():
    assert consecutive_positions(torch.arange(5), torch.arange(5))
    rows = torch.stack([torch.arange(5) + 2, torch.arange(5) + 9])
    assert consecutive_positions(rows, rows) and consecutive_positions(rows * 1.0, rows * 1.0)
    assert not consecutive_positions(torch.arange(5) * 2, torch.arange(5) * 2)
    assert not consecutive_positions(torch.arange(5), torch.arange(5) + 1)
    assert consecutive_positions(torch.arange(1), torch.arange(1))


@pytest.mark.parametrize("i0,i1,j0", [(0, 4, 0), (4, 8, 0), (4, 8, 2), (5, 6, 5)])
def test_the_future_mask_touches_only_the_blocks_own_keys(i0, i1, j0):
    """Masking in place (only the block's last i1 - i0 keys can follow a query) equals adding
    the whole block's mask."""
    logits = torch.randn(2, 3, i1 - i0, i1 - j0)
    want = logits + future_bias(i0, i1, logits.device, j0)
    assert mask_future_(logits, i0, i1, j0) is logits
    torch.testing.assert_close(logits, want)


@pytest.mark.parametrize("block", [1, 5, 256])
def test_bias_through_sdpa_equals_the_explicit_blocked_path(block, monkeypatch):
    """blocked_bias_sdpa (the bias as SDPA's mask, per block) against blocked_attend with the
    same bias added to the scaled logits."""
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(B, H, S, D, generator=gen) for _ in range(3))
    bias = torch.randn(B, H, S, S, generator=gen)
    seen = []

    def bias_fn(i0: int, i1: int) -> torch.Tensor:
        seen.append((i0, i1))
        return bias[..., i0:i1, :i1].clone()

    def scores(i0: int, i1: int, j0: int) -> tuple[torch.Tensor, None]:
        logits = q[..., i0:i1, :] @ k[..., j0:i1, :].transpose(-1, -2) * D**-0.5
        return logits + bias[..., i0:i1, j0:i1], None

    monkeypatch.setattr(budgets, "ATTEND_BLOCK_ELEMENTS", B * H * S * 3)  # 3 queries a block
    got = blocked.blocked_bias_sdpa(q, k, v, bias_fn, block, D**-0.5)
    torch.testing.assert_close(got, blocked_attend(v, scores, block), atol=1e-5, rtol=1e-5)
    assert max(i1 - i0 for i0, i1 in seen) == min(block, 3)
