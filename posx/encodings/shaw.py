"""Relative position representations (Shaw, Uszkoreit & Vaswani 2018).

Each layer learns vectors ``w^K_r`` and ``w^V_r`` for the clipped distance
``r = clip(j - i, -k, k)`` between query ``i`` and key ``j`` (shared by all heads, as in the
paper), and attention becomes

    e_ij = q_i . (k_j + a^K_ij) / sqrt(d_h),      z_i = sum_j softmax(e)_ij (v_j + a^V_ij)

with ``a^K_ij = w^K_{clip(j - i, -k, k)}``. Every distance beyond ``k`` shares one vector, so the
encoding is defined at any length. In a causal decoder ``j <= i``, so only the ``k + 1`` rows
for ``r <= 0`` are ever used; the table keeps all ``2k + 1`` rows of the paper.

With ``model.attention_kernel=flex`` (opt-in) the same attention runs in FlexAttention
(:meth:`Shaw.layer_flex_scores`): ``q_i . w^K_r`` as a per-query table ``[b, h, s, 2k + 1]`` read
by a ``score_mod``, the value term from the ``k`` nearest keys' probabilities and FlexAttention's
log-sum-exp.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posx.encodings.per_layer import PerLayer
from posx.kernels.band_terms import BandTerms
from posx.kernels.blocked import FarKeys, blocked_attend, fused_lse_available
from posx.kernels.flex.tables import (
    FlexScores,
    RelativeTables,
    band_value_term,
    table_score_mod,
)
from posx.kernels.near_band import near_band_attend
from posx.kernels.relative import (
    consecutive_positions,
    gather_relative,
    increasing_integer_positions,
    integer_distance,
    per_query,
)


def shaw_index(q_pos: Tensor, k_pos: Tensor, max_relative_position: int) -> Tensor:
    """Row of the relative table for every pair: ``clip(j - i, -k, k) + k``.

    Args:
        q_pos: Query positions ``[sq]`` or ``[b, sq]``.
        k_pos: Key positions ``[sk]`` or ``[b, sk]``.
        max_relative_position: The clipping distance ``k``.

    Returns:
        Long ``[sq, sk]`` or ``[b, sq, sk]`` in ``[0, 2k]``.
    """
    k = max_relative_position
    distance = integer_distance(k_pos.unsqueeze(-2) - q_pos.unsqueeze(-1))  # j - i
    return distance.clamp(-k, k) + k


class ShawTables(nn.Module):
    """One parameter set: the ``w^K`` and ``w^V`` tables, ``[2k + 1, d_h]`` each."""

    def __init__(self, head_dim: int, max_relative_position: int) -> None:
        super().__init__()
        rows = 2 * max_relative_position + 1
        self.w_k = nn.Parameter(torch.randn(rows, head_dim) * 0.02)
        self.w_v = nn.Parameter(torch.randn(rows, head_dim) * 0.02)


class Shaw(PerLayer):
    """Shaw et al.'s relative positions, one table pair per layer (the paper) or shared.

    Args:
        head_dim: Per-head width (from the model).
        n_layers: Number of layers (from the model).
        max_relative_position: Clipping distance ``k`` (16 in the paper's best setting).
        per_layer: Separate ``w^K``, ``w^V`` for each layer (paper) or one pair for all.
        block_size: Queries per attention block (the yaml ties it to ``model.attn_block_size``).
    """

    def __init__(
        self,
        head_dim: int,
        n_layers: int,
        max_relative_position: int = 16,
        per_layer: bool = True,
        block_size: int = 256,
    ) -> None:
        super().__init__(n_layers, per_layer)
        if max_relative_position < 1:
            raise ValueError(
                f"shaw max_relative_position must be >= 1, got {max_relative_position}"
            )
        self.max_relative_position, self.block_size = max_relative_position, block_size
        self.layers = nn.ModuleList(
            ShawTables(head_dim, max_relative_position) for _ in range(self.n_sets)
        )

    def decayed_parameter_names(self) -> set[str]:
        # embedding tables, decayed like the token embedding
        return {f"layers.{i}.{n}" for i in range(len(self.layers)) for n in ("w_k", "w_v")}

    def layer_attend(
        self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int
    ) -> Tensor:
        tables = self.layers[layer]
        scale = q.shape[-1] ** -0.5
        if fused_lse_available(q.device) and consecutive_positions(q_pos, k_pos):
            return self._near_band(q, k, v, tables, scale)  # evaluation (issue 34)
        # Both terms are linear in q: scaling q once costs O(s d_h), not a pass per block. Keys
        # transposed once: a transposed slice in every block's matmul was copied each time.
        q_scaled, k_t = q * scale, k.transpose(-1, -2).contiguous()
        w_k_t = tables.w_k.to(q.dtype).T.contiguous()

        def scores(i0: int, i1: int, j0: int) -> tuple[Tensor, Tensor]:
            qb = q_scaled[..., i0:i1, :]  # [b, h, bq, d_h]
            index = shaw_index(q_pos[..., i0:i1], k_pos[..., j0:i1], self.max_relative_position)
            content = qb @ k_t[..., j0:i1]  # [b, h, bq, i1 - j0]
            return content.add_(gather_relative(qb @ w_k_t, index)), index  # + q_i . a^K_ij

        def value_term(probs: Tensor, index: Tensor) -> Tensor:
            # sum_j p_ij w^V_{r(i,j)} = sum_r (sum of p_ij over the pairs in slot r) w^V_r
            slots = probs.new_zeros(*probs.shape[:-1], tables.w_v.shape[0])
            slots.scatter_add_(-1, per_query(index, probs), probs)
            return slots @ tables.w_v.float()

        # Keys k or more positions back share slot 0: content score + q_i . w^K_0, value
        # v_j + w^V_0; those go through the fused kernel (posx.kernels.blocked).
        def far() -> FarKeys:
            return FarKeys(
                distance=self.max_relative_position,
                q=q,
                k=k,
                scale=scale,
                q_pos=q_pos,
                k_pos=k_pos,
                logit_offset=(q @ tables.w_k[0].to(q.dtype)) * scale,
                value_offset=tables.w_v[0],
            )

        return blocked_attend(v, scores, self.block_size, value_term, far)

    def layer_flex_scores(
        self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int
    ) -> FlexScores | None:
        """Set ``layer``'s attention as FlexAttention runs it, at strictly increasing integer
        positions (else ``None``: :meth:`layer_attend`).

        The key term ``q_i . w^K_r`` is a per-query table ``[b, h, s, 2k + 1]`` (times the
        scale) whose column ``clip(j - i, -k, k) + k`` the ``score_mod`` reads. The value term
        ``sum_j p_ij w^V_r`` is ``w^V_0`` plus ``p_ij (w^V_r - w^V_0)`` over the ``k`` nearest
        keys of each query (a key ``m`` indices back is at least ``m`` positions back, so every
        further key has slot 0), their probabilities recomputed from FlexAttention's
        log-sum-exp (:func:`band_value_term`).
        """
        if not increasing_integer_positions(q_pos, k_pos):
            return None
        w_k, w_v = self.layers[layer].w_k, self.layers[layer].w_v
        k_max, scale = self.max_relative_position, q.shape[-1] ** -0.5
        # column c = clamp(i - j, -k, k) + k holds slot clip(j - i, -k, k) + k = 2k - c
        rows = torch.arange(2 * k_max, -1, -1, device=q.device)
        tables = RelativeTables(k_max, (q @ w_k.to(q.dtype).T) * scale, rows)

        def value_term(lse: Tensor) -> Tensor:
            return band_value_term(
                q, k, q_pos, k_pos, scale, tables, w_v - w_v[0], w_v[0], k_max, lse
            )

        score_mod = table_score_mod(q_pos, k_pos, tables)
        return FlexScores(q, k, scale, score_mod, value_term)

    def _near_band(
        self, q: Tensor, k: Tensor, v: Tensor, tables: ShawTables, scale: float
    ) -> Tensor:
        """Without a gradient, at consecutive positions: the ``k`` nearest keys of each query
        have their own slots, every key further back slot 0, so those go through one fused
        causal call and the near ones as a ``[b, h, s, k]`` band (:func:`near_band_attend`):
        no ``[block, keys]`` scores, gathers or ``scatter_add``. Tiny model at 1,024 tokens,
        one layer, one thread: 29 ms through the blocks, 12 ms so (SDPA alone: 9.6 ms)."""
        n = min(self.max_relative_position, q.shape[-2])
        # band row m holds key i - n + 1 + m, distance n - 1 - m: slot k - n + 1 + m
        slots = slice(self.max_relative_position - n + 1, self.max_relative_position + 1)
        w_k, w_v = tables.w_k, tables.w_v
        terms = BandTerms(
            query_rows=w_k[slots] - w_k[0], value_rows=w_v[slots] - w_v[0], far_value=w_v[0]
        )
        return near_band_attend(q, k, v, scale, n, terms)

    def extra_repr(self) -> str:
        return f"k={self.max_relative_position}, {super().extra_repr()}"
