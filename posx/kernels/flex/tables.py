"""FlexAttention for encodings that compute attention themselves: their scores as tables.

Shaw's ``q_i . w^K_{r(i,j)}``, DeBERTa's c2p ``q_i . K^r_{delta(i,j)}`` and p2c
``k_j . Q^r_{delta(j,i)}`` depend on a query's (or a key's) content and the pair's distance, and
only through a few rows per distance: a per-query table ``[b, h, sq, r]`` (a key's
``[b, h, sk, r']``) of every row, computed eagerly in ``O(s r d_h)`` with its autograd history,
holds all of them, and a ``score_mod`` reads one entry per pair, its row looked up by the pair's
distance clamped to where the rows stop changing (:class:`RelativeTables`). Nothing of size
``s x s`` exists: FlexAttention's fused kernel adds the entry to each score.

An encoding may also need what is not a score:

- a value term ``sum_j p_ij b_{r(i,j)}`` (Shaw's ``w^V``), whose ``b`` differs from a far row
  only for keys among the ``n`` nearest of each query by index: those keys' probabilities are
  recomputed explicitly (``O(s n d_h)``) from FlexAttention's log-sum-exp
  (:func:`band_value_term`), which FlexAttention's CUDA backward differentiates (torch >= 2.13,
  its Triton kernel; not the FLASH backend);
- wider queries and keys than values (Transformer-XL's position features appended to ``q`` and
  ``k``): FlexAttention takes a value width of its own.

An encoding hands all that over as :class:`FlexScores`; :func:`flex_scores_attention` runs it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from posx.kernels.flex.attention import ScoreMod, causal_flex, position_reader


@dataclass(frozen=True)
class RelativeTables:
    """Per-query (and per-key) tables that a ``score_mod`` reads by the pair's distance.

    Pair ``(i, j)`` at distance ``d = q_pos[i] - k_pos[j]`` gets
    ``query_table[b, h, i, query_rows[c]] + key_table[b, h, j, key_rows[c]]`` with
    ``c = clamp(d, -reach, reach) + reach``: the rows must not change beyond ``reach`` either
    way.

    Attributes:
        reach: Distances clamp to ``[-reach, reach]``.
        query_table: ``[b, h, sq, r]``, already times the attention's scale.
        query_rows: Long ``[2 reach + 1]``: the ``query_table`` row of each clamped distance.
        key_table: ``[b, h, sk, r']`` or ``None``.
        key_rows: Long ``[2 reach + 1]`` or ``None``.
    """

    reach: int
    query_table: Tensor
    query_rows: Tensor
    key_table: Tensor | None = None
    key_rows: Tensor | None = None

    def column(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """``clamp(q_pos - k_pos, -reach, reach) + reach`` (broadcasting; scalar code too)."""
        return (q_pos - k_pos).clamp(-self.reach, self.reach) + self.reach


def table_score_mod(q_pos: Tensor, k_pos: Tensor, tables: RelativeTables) -> ScoreMod:
    """The ``score_mod`` adding :class:`RelativeTables`' entries to each score.

    Scalar code, as FlexAttention's compiler requires; its indexing also broadcasts, so tests
    evaluate it on index grids on the CPU.

    Args:
        q_pos: Integer query positions ``[sq]`` or ``[b, sq]``.
        k_pos: Integer key positions ``[sk]`` or ``[b, sk]`` (the same layout).
        tables: The tables.

    Returns:
        ``(score, b, h, q_idx, kv_idx) -> score + entries``.
    """
    pair = position_reader(q_pos, k_pos)
    reach = tables.reach
    query_table, query_rows = tables.query_table, tables.query_rows
    key_table, key_rows = tables.key_table, tables.key_rows

    def score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        qp, kp = pair(b, q_idx, kv_idx)
        column = (qp - kp).clamp(-reach, reach) + reach
        term = query_table[b, h, q_idx, query_rows[column]]
        if key_table is not None and key_rows is not None:
            term = term + key_table[b, h, kv_idx, key_rows[column]]
        return score + term.to(score.dtype)

    return score_mod


@dataclass(frozen=True)
class FlexScores:
    """Causal attention as an encoding hands it to FlexAttention.

    ``out_i = softmax_j(scale q_i . k_j + score_mod) v + value_term(lse)``.

    Attributes:
        q: Queries ``[b, h, sq, e]`` (``e`` may exceed the values' width).
        k: Keys ``[b, h, sk, e]``.
        scale: Factor of ``q . k``.
        score_mod: Added to each scaled score (``None``: nothing).
        value_term: ``lse [b, h, sq] -> [b, h, sq, d_v]``, added to the output: what the
            values get besides ``v`` (``None``: nothing). It receives each query's
            log-sum-exp of its scores, so it can recompute any probability.
    """

    q: Tensor
    k: Tensor
    scale: float
    score_mod: ScoreMod | None = None
    value_term: Callable[[Tensor], Tensor] | None = None


def flex_scores_attention(scores: FlexScores, v: Tensor, compile: bool = True) -> Tensor:
    """Runs :class:`FlexScores` in causal FlexAttention.

    Args:
        scores: What the encoding hands over.
        v: Values ``[b, h, sk, d_v]``.
        compile: The compiled fused kernel (``False``: FlexAttention's unfused reference,
            which materialises the scores; for tests).

    Returns:
        ``[b, h, sq, d_v]`` in ``v``'s dtype.
    """
    q, k = scores.q, scores.k
    if scores.value_term is None:
        return causal_flex(q, k, v, scores.score_mod, compile, scores.scale)
    out, lse = causal_flex(q, k, v, scores.score_mod, compile, scores.scale, lse=True)
    return (_at_least_float32(out) + scores.value_term(lse)).to(v.dtype)


def band_value_term(
    q: Tensor,
    k: Tensor,
    q_pos: Tensor,
    k_pos: Tensor,
    scale: float,
    tables: RelativeTables,
    value_rows: Tensor,
    far_value: Tensor,
    n: int,
    lse: Tensor,
) -> Tensor:
    """``sum_j p_ij value_rows[query_rows[c(i, j)]] + far_value`` from FlexAttention's
    log-sum-exp, reading only the ``n`` nearest keys of each query (by index).

    Exact when every pair ``(i, j)`` further back than ``n - 1`` keys has a row of
    ``value_rows`` equal to zero (its value term is ``far_value``, which the probabilities,
    summing to 1, add once): e.g. Shaw's ``w^V - w^V_0`` at strictly increasing integer
    positions. The caller guarantees it. Each probability is recomputed as FlexAttention
    scored it, ``exp(scale q_i . k_j + entries - lse_i)``: ``O(s n d_h)``, one ``[b, h, s]``
    product per key offset, differentiable in every input (``lse`` included).

    Args:
        q: Queries ``[b, h, s, e]`` (as FlexAttention took them).
        k: Keys ``[b, h, s, e]``.
        q_pos: Integer query positions ``[s]`` or ``[b, s]``.
        k_pos: Integer key positions ``[s]`` or ``[b, s]``.
        scale: Factor of ``q . k``.
        tables: The score's tables (as the ``score_mod`` read them).
        value_rows: ``[r, d_v]``: row ``query_rows[c]`` is added at column ``c``'s pairs.
        far_value: ``[d_v]``: added to every value.
        n: Keys per query that may have a nonzero ``value_rows`` row.
        lse: Each query's log-sum-exp of its scores ``[b, h, s]``.

    Returns:
        ``[b, h, s, d_v]``, float32 (float64 for float64 inputs).
    """
    b, h, s, _ = q.shape
    qf, kf, lse = _at_least_float32(q), _at_least_float32(k), _at_least_float32(lse)
    values = value_rows.to(qf.dtype)
    out = far_value.to(qf.dtype).expand(b, h, s, -1).clone()
    for m in range(min(n, s)):  # key j = i - m of every query i >= m
        qp, kp = q_pos[..., m:], k_pos[..., : s - m]
        column = tables.column(qp, kp)  # [(b,) s - m]
        rows = per_batch(tables.query_rows[column], b)  # [b, s - m]
        logit = (qf[..., m:, :] * kf[..., : s - m, :]).sum(-1) * scale
        logit = logit + _read(tables.query_table[..., m:, :], rows).to(qf.dtype)
        if tables.key_table is not None and tables.key_rows is not None:
            key_rows = per_batch(tables.key_rows[column], b)
            logit = logit + _read(tables.key_table[..., : s - m, :], key_rows).to(qf.dtype)
        probs = (logit - lse[..., m:]).exp()  # [b, h, s - m]
        out[..., m:, :] += probs.unsqueeze(-1) * values[rows].unsqueeze(1)
    return out


def per_batch(index: Tensor, b: int) -> Tensor:
    """``[s]`` (shared by the batch) or ``[b, s]`` -> ``[b, s]``."""
    return index.expand(b, index.shape[-1])


def _read(table: Tensor, rows: Tensor) -> Tensor:
    """``table [b, h, s, r]`` at row ``rows [b, s]`` of each query: ``[b, h, s]``."""
    index = rows[:, None, :, None].expand(*table.shape[:-1], 1)
    return torch.gather(table, -1, index).squeeze(-1)


def _at_least_float32(x: Tensor) -> Tensor:
    """``x`` as float32, or as it is when wider (float64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))
