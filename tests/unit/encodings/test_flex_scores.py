"""The FlexAttention routes of the encodings that compute attention themselves (``flex_scores``:
shaw, deberta, transformer_xl) equal their reference scores and their ``attend``.

On CUDA, with ``model.attention_kernel=flex``, these run in FlexAttention's compiled kernel;
here the same ``score_mod`` s are evaluated on index grids (float64) against each paper's score
written out with the encoding's own index functions, FlexAttention's eager CPU forward against
``attend`` (whose oracle tests are test_shaw.py, test_deberta.py, test_transformer_xl.py), and
gradients of the dense evaluation (through the tables, and Shaw's value term through the
log-sum-exp) against ``attend``'s.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from posx.encodings.base import PositionalEncoding
from posx.encodings.deberta import DeBERTa
from posx.encodings.deberta_buckets import deberta_index
from posx.encodings.shaw import Shaw, shaw_index
from posx.encodings.transformer_xl import TransformerXL, xl_sinusoid
from posx.kernels.flex.attention import FLEX_AVAILABLE
from posx.kernels.flex.tables import flex_scores_attention
from tests.unit.kernels.test_flex_tables import dense_flex, grid

B, H, D, S = 2, 2, 8, 23
LAYER = 1
needs_flex = pytest.mark.skipif(not FLEX_AVAILABLE, reason="torch without FlexAttention")


def build(name: str) -> PositionalEncoding:
    """Two layers of the encoding with small tables (so that 23 tokens pass them), its
    parameters drawn at std 0.5 (learned tables start near zero, where any term would pass)."""
    torch.manual_seed(0)
    enc = {
        "shaw": lambda: Shaw(head_dim=D, n_layers=2, max_relative_position=3),
        "deberta": lambda: DeBERTa(d_model=H * D, n_heads=H, n_layers=2, max_relative_positions=5),
        "deberta_buckets": lambda: DeBERTa(
            d_model=H * D, n_heads=H, n_layers=2, max_relative_positions=20, position_buckets=8
        ),
        "transformer_xl": lambda: TransformerXL(
            n_heads=H, head_dim=D, d_model=H * D, n_layers=2, r_dim=6, share_uv=False
        ),
    }[name]()
    with torch.no_grad():
        for p in enc.parameters():
            p.normal_(std=0.5)
    return enc


NAMES = ["shaw", "deberta", "deberta_buckets", "transformer_xl"]
POSITIONS = {
    "consecutive": torch.arange(S),
    "gaps": torch.arange(S) * 3 + 5,
    "per row": torch.stack((torch.arange(S) + 40, torch.arange(S) * 2 + (torch.arange(S) > 9))),
    "descending, repeated": (torch.arange(S) // 2).flip(0) * 3,
}


def qkv(seed: int, dtype: torch.dtype = torch.float32, grad: bool = False) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, S, D, generator=gen, dtype=dtype).requires_grad_(grad) for _ in "qkv"]


def reference_scores(enc: PositionalEncoding, q, k, pos) -> torch.Tensor:
    """Each paper's logits ``[b, h, s, s]`` (before the causal mask), from its formula and the
    encoding's own index function."""
    p = pos if pos.dim() == 2 else pos.expand(B, S)
    if isinstance(enc, Shaw):
        w_k = enc.layers[LAYER].w_k
        a_k = w_k[shaw_index(p, p, enc.max_relative_position)]  # [b, s, s, d]
        content = q @ k.transpose(-1, -2)
        return (content + torch.einsum("bhid,bijd->bhij", q, a_k)) * D**-0.5
    if isinstance(enc, DeBERTa):
        rel = enc.rel_embeddings.weight
        lay = enc.layers[LAYER]
        k_r = (rel @ lay.key_proj.weight.T).view(-1, H, D)  # [2span, h, d]
        q_r = (rel @ lay.query_proj.weight.T).view(-1, H, D)
        span, buckets = enc.max_relative_positions, enc.position_buckets
        c2p_rows = deberta_index(p, p, span, buckets)  # delta(i, j) [b, s, s]
        p2c_rows = deberta_index(p, p, span, buckets).transpose(-1, -2)  # delta(j, i)
        c2p = torch.einsum("bhid,bijhd->bhij", q, k_r[c2p_rows])
        p2c = torch.einsum("bhjd,bijhd->bhij", k, q_r[p2c_rows])
        return (q @ k.transpose(-1, -2) + c2p + p2c) * (3 * D) ** -0.5
    w_r, u, v = enc.layers[LAYER].w_r, enc.u[LAYER], enc.v[LAYER]  # share_uv=False
    r = xl_sinusoid(p[:, :, None] - p[:, None, :], enc.r_dim).to(q.dtype)  # [b, s, s, r]
    rel = torch.einsum("hdr,bijr->bhijd", w_r, r)  # W_R R_{i-j}
    content = (q + u[:, None]) @ k.transpose(-1, -2)  # (a) + (c)
    position = torch.einsum("bhid,bhijd->bhij", q + v[:, None], rel)  # (b) + (d)
    return (content + position) * D**-0.5


def flex_logits(enc: PositionalEncoding, q, k, v, pos) -> torch.Tensor:
    """The logits FlexAttention computes from the encoding's ``flex_scores``: ``scale q2.k2``
    with the ``score_mod`` evaluated on index grids."""
    scores = enc.for_layer(LAYER).flex_scores(q, k, v, pos, pos)
    assert scores is not None
    logits = scores.q @ scores.k.transpose(-1, -2) * scores.scale
    return logits if scores.score_mod is None else grid(scores.score_mod, logits)


@pytest.mark.parametrize("pos", POSITIONS.values(), ids=POSITIONS.keys())
@pytest.mark.parametrize("name", NAMES)
def test_score_mod_on_index_grids_equals_the_papers_scores(name, pos):
    enc = build(name)
    if name == "shaw" and not bool((pos.diff(dim=-1) > 0).all()):
        pytest.skip("shaw's route takes strictly increasing positions (test below)")
    enc = enc.double() if name != "transformer_xl" else enc  # XL's features are float32
    dtype = torch.float64 if name != "transformer_xl" else torch.float32
    q, k, v = qkv(0, dtype)
    with torch.no_grad():
        got = flex_logits(enc, q, k, v, pos)
        expected = reference_scores(enc, q, k, pos)
    tol = {"atol": 2e-5, "rtol": 2e-5} if dtype == torch.float32 else {}
    torch.testing.assert_close(got, expected, **tol)


@needs_flex
@pytest.mark.parametrize("pos", POSITIONS.values(), ids=POSITIONS.keys())
@pytest.mark.parametrize("name", NAMES)
def test_eager_flex_attention_equals_attend(name, pos):
    """FlexAttention's unfused CPU forward with the encoding's scores (Shaw's value term from
    its log-sum-exp), against ``attend``; Shaw at positions that do not increase has no exact
    route (``None``: attention calls ``attend``)."""
    layer = build(name).for_layer(LAYER)
    q, k, v = qkv(1)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "called without torch.compile": intended here
        scores = layer.flex_scores(q, k, v, pos, pos)
        if scores is None:
            assert name == "shaw" and not bool((pos.diff(dim=-1) > 0).all())
            return
        got = flex_scores_attention(scores, v, compile=False)
        expected = layer.attend(q, k, v, pos, pos)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pos", list(POSITIONS.values())[:3], ids=list(POSITIONS)[:3])
@pytest.mark.parametrize("name", NAMES)
def test_dense_flex_gradients_equal_attends(name, pos):
    """What FlexAttention's backward differentiates on CUDA (the score_mod through its tables,
    Shaw's value term through the log-sum-exp), evaluated densely: the same gradients for
    q, k, v and every parameter as ``attend`` (the training path)."""
    enc = build(name)
    grads = []
    for run in ("flex", "attend"):
        q, k, v = qkv(2, grad=True)
        enc.zero_grad(set_to_none=True)
        layer = enc.for_layer(LAYER)
        if run == "flex":
            out = dense_flex(layer.flex_scores(q, k, v, pos, pos), v, pos)
        else:
            out = layer.attend(q, k, v, pos, pos)
        (out * torch.linspace(-1, 1, D)).sum().backward()
        grads.append([q.grad, k.grad, v.grad, *(p.grad for p in enc.parameters())])
    for got, expected in zip(*grads, strict=True):
        if expected is None:  # another layer's parameters: no gradient either way
            assert got is None
            continue
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_routes_say_which_positions_they_take():
    """Shaw needs strictly increasing integer positions (its value term reads the k nearest
    keys by index), DeBERTa integer ones (rows by integer distance); Transformer-XL's feature
    form takes any, fractional ones too."""
    q, k, v = qkv(3)
    pos = torch.arange(S)
    with torch.no_grad():
        shaw = build("shaw").for_layer(LAYER)
        assert shaw.flex_scores(q, k, v, pos, pos) is not None
        assert shaw.flex_scores(q, k, v, pos * 0, pos * 0) is None
        assert shaw.flex_scores(q, k, v, pos * 0.5, pos * 0.5) is None
        deberta = build("deberta").for_layer(LAYER)
        assert deberta.flex_scores(q, k, v, pos * 0.5, pos * 0.5) is None
        owner = build("transformer_xl")
        xl, half = owner.for_layer(LAYER), pos * 0.5
        scores = xl.flex_scores(q, k, v, half, half)
        assert scores.q.shape == (B, H, S, D + owner.r_dim) and scores.score_mod is None
        got = dense_flex(scores, v, half)
        torch.testing.assert_close(got, xl.attend(q, k, v, half, half), atol=1e-5, rtol=1e-5)
    for enc in (build(n) for n in NAMES):
        assert enc.has_flex_scores and enc.for_layer(0).has_flex_scores
        with pytest.raises(RuntimeError, match="call for_layer"):
            enc.flex_scores(q, k, v, pos, pos)
