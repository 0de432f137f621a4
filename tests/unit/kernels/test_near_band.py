"""near_band_attend (issue 34) against a dense attention with the same relative terms: every
field of BandTerms, tables shared and per head, both routes (the explicit band where there are
value terms, the flash kernel's otherwise), one segment and many."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from posx.kernels import near_band
from posx.kernels.band_terms import BandTerms
from posx.kernels.near_band import near_band_attend


def dense(q: Tensor, k: Tensor, v: Tensor, scale: float, n: int, terms: BandTerms) -> Tensor:
    """Every pair's terms picked by distance, the [s, s] scores, causal softmax."""
    b, h, s, d = q.shape
    dist = torch.arange(s).unsqueeze(-1) - torch.arange(s)  # i - j
    near = (dist >= 0) & (dist < n)
    row = (n - 1 - dist).clamp(0, n - 1)  # the band row of a near pair
    content = scale * torch.einsum("bhid,bhjd->bhij", q, k)
    logits = content.clone()
    zero = torch.zeros(b, h, s, s)
    if terms.query_rows is not None:
        rows = terms.query_rows if terms.query_rows.dim() == 3 else terms.query_rows.expand(h, n, d)
        zero = zero + scale * torch.einsum("bhid,hijd->bhij", q, rows[:, row])
    if terms.key_rows is not None:
        rows = terms.key_rows if terms.key_rows.dim() == 3 else terms.key_rows.expand(h, n, d)
        zero = zero + torch.einsum("bhjd,hijd->bhij", k, rows[:, row])
    if terms.bias is not None:
        bias = terms.bias if terms.bias.dim() == 2 else terms.bias.expand(h, n)
        zero = zero + bias[:, row]
    logits = torch.where(near, logits + zero, logits)
    probs = torch.softmax(logits.masked_fill(dist < 0, float("-inf")), dim=-1)
    out = probs @ v
    if terms.far_value is not None:
        out = out + terms.far_value
    if terms.value_rows is not None:
        a_v = torch.where(near.unsqueeze(-1), terms.value_rows[row], torch.zeros(d))
        out = out + torch.einsum("bhij,ijd->bhid", probs, a_v)
    return out


def _terms(kind: str, b: int, h: int, s: int, d: int, n: int, gen: torch.Generator) -> BandTerms:
    def randn(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=gen)

    if kind == "shaw":  # shared query rows and value terms: the explicit route
        return BandTerms(query_rows=randn(n, d), value_rows=randn(n, d), far_value=randn(d))
    if kind == "shaw keys only":
        return BandTerms(query_rows=randn(n, d))
    if kind == "deberta":  # per-head tables on both sides and a bias: the flash route
        return BandTerms(query_rows=randn(h, n, d), key_rows=randn(h, n, d), bias=randn(h, n))
    if kind == "shared tables":
        return BandTerms(key_rows=randn(n, d), bias=randn(n))
    if kind == "per-head keys, explicit":
        return BandTerms(key_rows=randn(h, n, d), bias=randn(h, n), far_value=randn(d))
    assert kind == "none"
    return BandTerms()


KINDS = ["shaw", "shaw keys only", "deberta", "shared tables", "per-head keys, explicit", "none"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("segments", ["one", "many"])
@pytest.mark.parametrize(
    ("b", "h", "s", "d", "n"),
    [
        (1, 1, 1, 4, 1),
        (2, 3, 7, 4, 3),
        (1, 2, 40, 8, 1),
        (2, 2, 50, 8, 16),
        (1, 2, 45, 8, 20),
        (2, 1, 10, 4, 10),
        (1, 2, 100, 4, 33),
    ],
)
def test_equals_the_dense_attention(b, h, s, d, n, kind, segments, monkeypatch):
    if segments == "many":
        monkeypatch.setattr(near_band, "SEGMENT_ELEMENTS", 1)  # a chunk per segment
    gen = torch.Generator().manual_seed(s * n)
    q, k, v = (torch.randn(b, h, s, d, generator=gen) for _ in range(3))
    terms = _terms(kind, b, h, s, d, n, gen)
    with torch.no_grad():
        got = near_band_attend(q, k, v, d**-0.5, n, terms)
        torch.testing.assert_close(got, dense(q, k, v, d**-0.5, n, terms), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", ["deberta", "shaw"])
def test_each_route_is_the_one_intended(kind, monkeypatch):
    """Value terms need the band's probabilities (the explicit route); without them the flash
    kernel takes the band."""
    calls: list[str] = []
    for name in ("_flash_band", "_explicit_band"):
        real = getattr(near_band, name)
        monkeypatch.setattr(
            near_band, name, lambda *a, name=name, real=real: calls.append(name) or real(*a)
        )
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 70, 8, generator=gen) for _ in range(3))
    near_band_attend(q, k, v, 0.3, 20, _terms(kind, 1, 2, 70, 8, 20, gen))
    assert set(calls) == {"_flash_band" if kind == "deberta" else "_explicit_band"}
