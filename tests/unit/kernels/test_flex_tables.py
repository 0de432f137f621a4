"""posx/kernels/flex/tables.py: the tables' score_mod on index grids, the band's value term
against a dense softmax, and FlexAttention's eager forward (the function CUDA compiles) with
both, against dense attention."""

from __future__ import annotations

import warnings

import pytest
import torch

from posx.kernels.flex.attention import FLEX_AVAILABLE
from posx.kernels.flex.tables import (
    FlexScores,
    RelativeTables,
    band_value_term,
    flex_scores_attention,
    table_score_mod,
)

B, H, S, D = 2, 3, 19, 5
needs_flex = pytest.mark.skipif(not FLEX_AVAILABLE, reason="torch without FlexAttention")

POSITIONS = {
    "consecutive": torch.arange(S),
    "gaps": torch.arange(S) * 3 + 11,
    "per row": torch.stack((torch.arange(S) + 4, torch.arange(S).square())),
    "descending, repeated": (torch.arange(S) // 2).flip(0),
}


def grid(score_mod, score: torch.Tensor) -> torch.Tensor:
    """``score_mod`` at every (row, head, query, key) of ``score [b, h, sq, sk]``."""
    b, h, sq, sk = (torch.arange(n) for n in score.shape)
    return score_mod(
        score, b[:, None, None, None], h[None, :, None, None], sq[:, None], sk[None, :]
    )


def random_tables(gen: torch.Generator, reach: int, keys: bool = True) -> RelativeTables:
    """Tables of 4 and 3 rows and arbitrary row lookups over ``2 reach + 1`` distances."""
    return RelativeTables(
        reach,
        torch.randn(B, H, S, 4, generator=gen, dtype=torch.float64),
        torch.randint(0, 4, (2 * reach + 1,), generator=gen),
        torch.randn(B, H, S, 3, generator=gen, dtype=torch.float64) if keys else None,
        torch.randint(0, 3, (2 * reach + 1,), generator=gen) if keys else None,
    )


def dense_entries(tables: RelativeTables, pos: torch.Tensor) -> torch.Tensor:
    """Each pair's entries by loops over the pairs: ``[b, h, s, s]``."""
    out = torch.zeros(B, H, S, S, dtype=torch.float64)
    for b in range(B):
        p = pos[b] if pos.dim() == 2 else pos
        for i in range(S):
            for j in range(S):
                c = max(-tables.reach, min(tables.reach, int(p[i] - p[j]))) + tables.reach
                out[b, :, i, j] = tables.query_table[b, :, i, tables.query_rows[c]]
                if tables.key_table is not None:
                    out[b, :, i, j] += tables.key_table[b, :, j, tables.key_rows[c]]
    return out


@pytest.mark.parametrize("keys", [True, False], ids=["query and key tables", "query table"])
@pytest.mark.parametrize("pos", POSITIONS.values(), ids=POSITIONS.keys())
def test_table_score_mod_adds_each_pairs_entries(pos, keys):
    gen = torch.Generator().manual_seed(0)
    tables = random_tables(gen, reach=4, keys=keys)
    score = torch.randn(B, H, S, S, generator=gen, dtype=torch.float64)
    got = grid(table_score_mod(pos, pos, tables), score)
    torch.testing.assert_close(got, score + dense_entries(tables, pos))


def dense_flex(scores: FlexScores, v: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """What :func:`flex_scores_attention` computes, written out: the score_mod on index grids,
    a causal softmax, and the value term of the dense log-sum-exp."""
    logits = scores.q @ scores.k.transpose(-1, -2) * scores.scale
    if scores.score_mod is not None:
        logits = grid(scores.score_mod, logits)
    s = logits.shape[-1]
    logits = logits.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), -torch.inf)
    out = logits.softmax(-1) @ v
    if scores.value_term is not None:
        out = out + scores.value_term(logits.logsumexp(-1))
    return out


INCREASING = {k: v for k, v in POSITIONS.items() if k != "descending, repeated"}
N = 4  # keys per query with a value row of their own
SCALE = 0.4


def value_case(seed: int = 1, grad: bool = False):
    """Random ``q, k, v``, tables (rows looked up over distances ``-N .. N``) and value vectors
    ``w`` (Shaw's ``w^V``), row 0 from distance ``N`` on: the band reads ``w - w_0``, zero
    there, as :func:`band_value_term` needs at increasing positions. Returns
    ``(leaves, tables)``, ``leaves = [q, k, v, w, query_table, key_table]``."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, S, D, generator=gen, dtype=torch.float64) for _ in range(3))
    tables = random_tables(gen, reach=N)
    rows = torch.randint(1, 4, (2 * N + 1,), generator=gen)
    rows[-1] = 0  # column 2N: distance N and beyond
    w = torch.randn(4, D, generator=gen, dtype=torch.float64)
    leaves = [q, k, v, w, tables.query_table, tables.key_table]
    for t in leaves:
        t.requires_grad_(grad)
    tables = RelativeTables(N, tables.query_table, rows, tables.key_table, tables.key_rows)
    return leaves, tables


def band_scores(leaves, tables: RelativeTables, pos: torch.Tensor) -> FlexScores:
    q, k, _, w, _, _ = leaves

    def value_term(lse: torch.Tensor) -> torch.Tensor:
        return band_value_term(q, k, pos, pos, SCALE, tables, w - w[0], w[0], N, lse)

    return FlexScores(q, k, SCALE, table_score_mod(pos, pos, tables), value_term)


def dense_reference(leaves, tables: RelativeTables, pos: torch.Tensor) -> torch.Tensor:
    """``softmax(scale q.k + entries) (v_j + w[row(i, j)])`` over every causal pair: ``w``
    read at every key, not only the band's."""
    q, k, v, w, _, _ = leaves
    logits = q @ k.transpose(-1, -2) * SCALE + dense_entries(tables, pos)
    logits = logits.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), -torch.inf)
    probs = logits.softmax(-1)
    p = pos if pos.dim() == 2 else pos.expand(B, S)
    column = (p[:, :, None] - p[:, None, :]).clamp(-N, N) + N  # [b, s, s]
    per_pair = w[tables.query_rows[column]]  # [b, s, s, d]
    return probs @ v + torch.einsum("bhij,bijd->bhid", probs, per_pair)


@pytest.mark.parametrize("pos", INCREASING.values(), ids=INCREASING.keys())
def test_band_value_term_equals_every_pairs_value_rows(pos):
    """At strictly increasing positions every key ``N`` or more back has row 0: the band's
    ``N`` nearest keys give the whole value term, from the log-sum-exp."""
    leaves, tables = value_case()
    got = dense_flex(band_scores(leaves, tables, pos), leaves[2], pos)
    torch.testing.assert_close(got, dense_reference(leaves, tables, pos))


@pytest.mark.parametrize("pos", INCREASING.values(), ids=INCREASING.keys())
def test_band_value_term_gradients_flow_through_the_log_sum_exp(pos):
    """Gradients of the dense FlexAttention (log-sum-exp included, as FlexAttention's CUDA
    backward differentiates it) equal the reference's, for every input and table."""
    grads = []
    for run in ("flex", "reference"):
        leaves, tables = value_case(seed=2, grad=True)
        if run == "flex":
            out = dense_flex(band_scores(leaves, tables, pos), leaves[2], pos)
        else:
            out = dense_reference(leaves, tables, pos)
        (out * torch.linspace(-1, 1, D, dtype=torch.float64)).sum().backward()
        grads.append([t.grad for t in leaves])
    for got, expected in zip(*grads, strict=True):
        assert got is not None and expected is not None
        torch.testing.assert_close(got, expected)


@needs_flex
@pytest.mark.parametrize("values", [False, True], ids=["scores", "scores and values"])
@pytest.mark.parametrize("pos", INCREASING.values(), ids=INCREASING.keys())
def test_eager_flex_attention_runs_the_scores(pos, values):
    """FlexAttention's own eager forward (what CUDA compiles), its log-sum-exp feeding the
    value term, and queries and keys wider than the values."""
    leaves, tables = value_case(seed=3)
    q, k, v = (t.float() for t in leaves[:3])
    wide = [torch.cat((t, t[..., :2] * 0.5), -1) for t in (q, k)]  # e = D + 2, d_v = D
    leaves32 = [*wide, v, *(t.float() for t in leaves[3:])]
    tables32 = RelativeTables(N, leaves32[4], tables.query_rows, leaves32[5], tables.key_rows)
    scores = band_scores(leaves32, tables32, pos)
    if not values:
        scores = FlexScores(scores.q, scores.k, SCALE, scores.score_mod)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "called without torch.compile": intended here
        got = flex_scores_attention(scores, v, compile=False)
    assert got.shape == (B, H, S, D) and got.dtype == torch.float32
    torch.testing.assert_close(got, dense_flex(scores, v, pos), atol=1e-5, rtol=1e-5)
