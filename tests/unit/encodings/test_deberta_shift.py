"""DeBERTa at consecutive positions (c2p and p2c read as shifted views) equals the former
gather-based computation, on each of its paths: one autograd node for a single query block
(``DisentangledAttention``), blocked attention (training at longer lengths), and SDPA with the
terms as its mask (evaluation).

``reference_layer_attend`` is the body ``DeBERTa.layer_attend`` had before it read both terms by
distance: a ``[bq, 2k]`` c2p table per block and a key-major ``[s, 2k]`` p2c table, each read
through a per-pair index. The new path must give the same outputs and gradients, blocked and
unblocked, with and without log buckets, on the explicit path (a gradient is wanted) and the
fused far-key path (none is), at positions that do not start at 0 and that differ per row.
"""

from __future__ import annotations

import pytest
import torch

from posx.encodings import deberta
from posx.encodings.deberta import DeBERTa
from posx.encodings.deberta_buckets import deberta_index
from posx.kernels.blocked import FarKeys, blocked_attend
from posx.kernels.budget import MAX_BLOCK_ELEMENTS
from posx.kernels.relative import per_query

H, D = 2, 4


def reference_layer_attend(enc: DeBERTa, q, k, v, q_pos, k_pos, layer: int) -> torch.Tensor:
    """The former ``DeBERTa.layer_attend``, verbatim but for ``self`` -> ``enc``."""
    projections = enc.layers[layer]
    rel = enc.rel_embeddings.weight
    k_r = enc._heads(projections.key_proj(rel)).to(q.dtype)
    q_r = enc._heads(projections.query_proj(rel)).to(q.dtype)
    scale = (3 * q.shape[-1]) ** -0.5
    span, buckets = enc.max_relative_positions, enc.position_buckets
    q_scaled, q_r_scaled = q * scale, q_r * scale
    k_t, k_r_t = k.transpose(-1, -2).contiguous(), k_r.transpose(-1, -2).contiguous()
    b, h, s, _ = k.shape
    fits = b * h * q_r.shape[-2] * s <= MAX_BLOCK_ELEMENTS
    p2c_all = k @ q_r_scaled.transpose(-1, -2) if fits else None

    def scores(i0, i1, j0):
        qb = q_scaled[..., i0:i1, :]
        qp, kp = q_pos[..., i0:i1], k_pos[..., j0:i1]
        content = qb @ k_t[..., j0:i1]
        idx = deberta_index(qp, kp, span, buckets)
        content += torch.gather(qb @ k_r_t, -1, per_query(idx, content))
        idx_t = deberta_index(kp, qp, span, buckets)
        if p2c_all is None:
            p2c_keys = q_r_scaled @ k_t[..., j0:i1]
            p2c = torch.gather(p2c_keys, -2, per_query(idx_t.transpose(-1, -2), content))
        else:
            key_rows = p2c_all[..., j0:i1, :]
            p2c = torch.gather(key_rows, -1, per_query(idx_t, key_rows)).transpose(-1, -2)
        return content.add_(p2c), None

    def far():
        return FarKeys(
            distance=enc.far_distance,
            q=q + q_r[:, :1],
            k=k,
            scale=scale,
            q_pos=q_pos,
            k_pos=k_pos,
            logit_offset=(q @ k_r[:, -1:].transpose(-1, -2)).squeeze(-1) * scale,
        )

    return blocked_attend(v, scores, enc.block_size, far=far)


def _setup(s: int, span: int, buckets: int, block: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    enc = DeBERTa(
        d_model=H * D,
        n_heads=H,
        n_layers=2,
        max_relative_positions=span,
        position_buckets=buckets,
        block_size=block,
    )
    with torch.no_grad():
        for p in enc.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    q, k, v = (torch.randn(2, H, s, D, generator=gen) for _ in range(3))
    return enc, q, k, v


CASES = [  # (s, span, buckets, block)
    (1, 3, 0, 256),
    (7, 3, 0, 2),
    (7, 3, 0, 256),
    (64, 128, 0, 256),  # the tiny model's training step: one block, no pair clipped
    (90, 40, 8, 256),  # one block, log buckets
    (40, 16, 0, 8),
    (40, 64, 0, 16),  # no pair reaches the clipping distance
    (90, 40, 8, 32),  # log buckets
    (130, 8, 0, 256),
    (300, 40, 0, 16),  # p2c in several key chunks per block (P2C_KEY_CHUNK = 64)
]
POSITIONS = ["arange", "offset", "per_row"]


def _positions(kind: str, s: int) -> torch.Tensor:
    if kind == "arange":
        return torch.arange(s)
    if kind == "offset":
        return torch.arange(s) + 11
    return torch.stack((torch.arange(s) + 3, torch.arange(s) + 50))  # [b, s], each consecutive


@pytest.mark.parametrize("kind", POSITIONS)
@pytest.mark.parametrize(("s", "span", "buckets", "block"), CASES)
def test_shifted_terms_equal_the_gathers_forward_and_backward(s, span, buckets, block, kind):
    pos = _positions(kind, s)
    outs, grads = [], []
    for attend in (
        lambda e, *a: e.for_layer(1).attend(*a),
        lambda e, *a: reference_layer_attend(e, *a, layer=1),
    ):
        enc, q, k, v = _setup(s, span, buckets, block, seed=s + span)
        for t in (q, k, v):
            t.requires_grad_(True)
        out = attend(enc, q, k, v, pos, pos)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        outs.append(out.detach())
        named = sorted((n, p.grad) for n, p in enc.named_parameters() if p.grad is not None)
        grads.append([q.grad, k.grad, v.grad, *(g for _, g in named)])
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-4)
    assert len(grads[0]) == len(grads[1]) > 3
    for got, expected in zip(*grads, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", POSITIONS)
@pytest.mark.parametrize(("s", "span", "buckets", "block"), CASES)
def test_shifted_terms_equal_the_gathers_on_the_far_key_path(s, span, buckets, block, kind):
    pos = _positions(kind, s)
    enc, q, k, v = _setup(s, span, buckets, block, seed=7)
    with torch.no_grad():
        got = enc.for_layer(0).attend(q, k, v, pos, pos)
        expected = reference_layer_attend(enc, q, k, v, pos, pos, layer=0)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_consecutive_positions_take_no_gather(monkeypatch):
    """The shifted path is the one taken: no gather builds c2p or p2c (it fails with the
    former code, which gathered both)."""
    enc, q, k, v = _setup(40, 16, 0, 8, seed=1)
    calls = []
    real = torch.gather
    monkeypatch.setattr(deberta.torch, "gather", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    enc.for_layer(0).attend(q, k, v, torch.arange(40), torch.arange(40))
    assert calls == []


def _spy(monkeypatch, name: str, calls: list[str]) -> None:
    real = getattr(deberta, name)
    if name == "DisentangledAttention":
        spied = type(
            "Spy", (), {"apply": staticmethod(lambda *a: calls.append(name) or real.apply(*a))}
        )
    else:
        spied = lambda *a, **kw: calls.append(name) or real(*a, **kw)  # noqa: E731
    monkeypatch.setattr(deberta, name, spied)


@pytest.mark.parametrize(
    ("s", "block", "grad", "path"),
    [
        (40, 256, True, "DisentangledAttention"),  # training, one block
        (40, 256, False, "DisentangledAttention"),  # evaluation, one block
        (40, 8, True, "blocked_attend"),  # training, several blocks
        (40, 8, False, "near_band_attend"),  # evaluation, several blocks
    ],
)
def test_each_path_is_taken_where_intended(monkeypatch, s, block, grad, path):
    """The equality tests above cover the path they mean to: which one runs, by shape and
    gradient (a spy on each)."""
    calls: list[str] = []
    for name in ("DisentangledAttention", "blocked_attend", "near_band_attend"):
        _spy(monkeypatch, name, calls)
    enc, q, k, v = _setup(s, 16, 0, block, seed=2)
    with torch.set_grad_enabled(grad):
        enc.for_layer(0).attend(q, k, v, torch.arange(s), torch.arange(s))
    assert calls == [path]


@pytest.mark.parametrize(("span", "buckets"), [(16, 0), (40, 8), (300, 0)])
def test_long_evaluation_takes_the_band_at_any_length(monkeypatch, span, buckets):
    """Evaluation takes the band whatever the length (it was SDPA with a mask up to 4,096
    tokens, the blocked path past it): the keys from the saturation distance back in one
    fused causal call, so nothing grows as s^2; same result as the former implementation,
    with log buckets, and with a saturation distance past the length (no far part)."""
    calls: list[int] = []
    real = deberta.near_band_attend
    monkeypatch.setattr(deberta, "near_band_attend", lambda *a: calls.append(a[4]) or real(*a))
    enc, q, k, v = _setup(260, span, buckets, 16, seed=4)
    pos = torch.arange(260) + 5
    with torch.no_grad():
        got = enc.for_layer(1).attend(q, k, v, pos, pos)
        expected = reference_layer_attend(enc, q, k, v, pos, pos, layer=1)
    assert calls == [min(260, enc.far_distance)]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_other_dtypes_keep_the_blocked_path(monkeypatch):
    """float64 (and bf16, and CUDA) stay on the blocked path: the fast paths are float32 CPU."""
    calls: list[str] = []
    _spy(monkeypatch, "blocked_attend", calls)
    enc, q, k, v = _setup(20, 8, 0, 256, seed=5)
    enc = enc.double()
    pos = torch.arange(20)
    got = enc.for_layer(0).attend(q.double(), k.double(), v.double(), pos, pos)
    expected = reference_layer_attend(enc, q.double(), k.double(), v.double(), pos, pos, 0)
    assert calls == ["blocked_attend"]
    torch.testing.assert_close(got, expected)


def test_posx_eval_takes_the_band(cli, tmp_path, monkeypatch):
    """Through the command a user types: ``posx eval`` of a trained DeBERTa run at a length
    one query block cannot hold, past the saturation distance, evaluates through the near band
    (keys further back in the fused causal call), and its rows are ok."""
    import pandas as pd

    from posx.encodings.deberta_buckets import saturation_distance
    from tests.conftest import TINY

    calls: list[int] = []
    real = deberta.near_band_attend
    monkeypatch.setattr(deberta, "near_band_attend", lambda *a: calls.append(a[4]) or real(*a))
    trained = cli("train", *TINY, "train.steps=2", "encoding=deberta", "model.attn_block_size=8",
                  "encoding.max_relative_positions=16", f"root={tmp_path}")  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    (run_json,) = tmp_path.rglob("run.json")
    calls.clear()
    out = cli("eval", str(run_json.parent), "--lengths", "64", "--no-progress")
    assert out.returncode == 0, out.stderr
    assert calls and set(calls) == {saturation_distance(16)}  # < 64: a far part too
    rows = pd.read_csv(run_json.parent / "eval.csv").set_index("eval_length")
    assert rows.loc[64, "status"] == "ok"
