"""Shaw's evaluation through the near band (issue 34) against the former blocked path, kept here
as the reference: the same attention at consecutive positions from 0, offset, per row, on
several shapes, blocked and unblocked; other positions and training keep the former path."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from posx.encodings import shaw as shaw_module
from posx.encodings.shaw import Shaw, shaw_index
from posx.kernels.blocked import FarKeys, blocked_attend
from posx.kernels.relative import gather_relative, per_query


def former_layer_attend(
    enc: Shaw, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int
) -> Tensor:
    """``Shaw.layer_attend`` before issue 34's near band (commit ce6b4ec), verbatim."""
    tables = enc.layers[layer]
    scale = q.shape[-1] ** -0.5
    q_scaled, k_t = q * scale, k.transpose(-1, -2).contiguous()
    w_k_t = tables.w_k.to(q.dtype).T.contiguous()

    def scores(i0: int, i1: int, j0: int) -> tuple[Tensor, Tensor]:
        qb = q_scaled[..., i0:i1, :]
        index = shaw_index(q_pos[..., i0:i1], k_pos[..., j0:i1], enc.max_relative_position)
        content = qb @ k_t[..., j0:i1]
        return content.add_(gather_relative(qb @ w_k_t, index)), index

    def value_term(probs: Tensor, index: Tensor) -> Tensor:
        slots = probs.new_zeros(*probs.shape[:-1], tables.w_v.shape[0])
        slots.scatter_add_(-1, per_query(index, probs), probs)
        return slots @ tables.w_v.float()

    def far() -> FarKeys:
        return FarKeys(
            distance=enc.max_relative_position,
            q=q,
            k=k,
            scale=scale,
            q_pos=q_pos,
            k_pos=k_pos,
            logit_offset=(q @ tables.w_k[0].to(q.dtype)) * scale,
            value_offset=tables.w_v[0],
        )

    return blocked_attend(v, scores, enc.block_size, value_term, far)


def encoding(head_dim: int, k: int, block: int, seed: int) -> Shaw:
    """A two-layer Shaw with tables large enough to matter."""
    gen = torch.Generator().manual_seed(seed)
    enc = Shaw(head_dim=head_dim, n_layers=2, max_relative_position=k, block_size=block)
    with torch.no_grad():
        for p in enc.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return enc


def positions(kind: str, b: int, s: int) -> Tensor:
    if kind == "from 0":
        return torch.arange(s)
    if kind == "offset":
        return torch.arange(s) + 1000
    return torch.stack([torch.arange(s) + 7 * r for r in range(b)])  # per row


def qkv(b: int, h: int, s: int, d: int, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """q, k, v as strided views of one fused projection, as the model hands them over."""
    gen = torch.Generator().manual_seed(seed)
    fused = torch.randn(b, s, 3, h, d, generator=gen)
    q, k, v = (fused[:, :, i].transpose(1, 2) for i in range(3))
    return q, k, v


SHAPES = [  # (b, h, s, d_h, k): below, at and past k, chunk and segment boundaries, d_h 16, 32
    (1, 1, 1, 4, 2),
    (2, 3, 5, 4, 8),
    (2, 2, 16, 8, 16),
    (2, 2, 17, 8, 16),
    (1, 2, 33, 8, 4),
    (3, 4, 64, 16, 16),
    (2, 2, 100, 8, 40),
    (2, 4, 300, 32, 16),
]


@pytest.mark.parametrize("block", [7, 256])
@pytest.mark.parametrize("kind", ["from 0", "offset", "per row"])
@pytest.mark.parametrize(("b", "h", "s", "d", "k"), SHAPES)
def test_near_band_equals_the_former_path(b, h, s, d, k, kind, block, monkeypatch):
    enc = encoding(d, k, block, seed=s)
    q, k_, v = qkv(b, h, s, d, seed=s + 1)
    pos = positions(kind, b, s)
    calls = []
    band = shaw_module.near_band_attend
    monkeypatch.setattr(shaw_module, "near_band_attend", lambda *a: calls.append(1) or band(*a))
    with torch.inference_mode():
        for layer in (0, 1):
            got = enc.layer_attend(q, k_, v, pos, pos, layer)
            want = former_layer_attend(enc, q, k_, v, pos, pos, layer)
            torch.testing.assert_close(got, want, atol=2e-6, rtol=2e-5)
    assert len(calls) == 2


@pytest.mark.parametrize("k", [16, 40])
def test_segments_of_the_band_give_the_same_result(k, monkeypatch):
    """Long inputs are banded in segments (bounded temporaries): one chunk per segment equals
    one segment for all (k = 40: the keys before 0 span several segments)."""
    enc = encoding(8, k, 256, seed=3)
    q, k, v = qkv(2, 2, 200, 8, seed=4)
    pos = torch.arange(200)
    with torch.no_grad():
        whole = enc.layer_attend(q, k, v, pos, pos, 0)
        monkeypatch.setattr("posx.kernels.near_band.SEGMENT_ELEMENTS", 1)
        segmented = enc.layer_attend(q, k, v, pos, pos, 0)
    torch.testing.assert_close(segmented, whole, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(whole, former_layer_attend(enc, q, k, v, pos, pos, 0))


@pytest.mark.parametrize(
    "pos", [torch.arange(40) * 2, torch.tensor([3, 1, 2] + list(range(5, 42)))]
)
def test_other_positions_keep_the_former_path(pos, monkeypatch):
    """Gaps or shuffles: distance is not the index difference, the band does not apply."""

    def no_band(*args: object) -> None:
        raise AssertionError("only consecutive positions take the near band")

    monkeypatch.setattr(shaw_module, "near_band_attend", no_band)
    enc = encoding(8, 4, 16, seed=5)
    q, k, v = qkv(2, 2, 40, 8, seed=6)
    with torch.no_grad():
        got = enc.layer_attend(q, k, v, pos, pos, 0)
    torch.testing.assert_close(got, former_layer_attend(enc, q, k, v, pos, pos, 0))


def test_training_keeps_the_former_path_and_its_gradients(monkeypatch):
    """With a gradient the near band (no gradient through the fused log-sum-exp) is not used;
    outputs and every gradient equal the former implementation's."""

    def no_band(*args: object) -> None:
        raise AssertionError("training must not take the near band")

    monkeypatch.setattr(shaw_module, "near_band_attend", no_band)
    enc = encoding(8, 4, 16, seed=7)
    pos = torch.arange(37)
    grads = []
    for attend in (enc.layer_attend, lambda *a: former_layer_attend(enc, *a)):
        q, k, v = (t.detach().requires_grad_() for t in qkv(2, 2, 37, 8, seed=8))
        enc.zero_grad()
        out = attend(q, k, v, pos, pos, 0)
        out.square().sum().backward()
        tables = enc.layers[0]
        grads.append([out.detach(), q.grad, k.grad, v.grad, tables.w_k.grad, tables.w_v.grad])
    for got, want in zip(*grads, strict=True):
        torch.testing.assert_close(got, want)
