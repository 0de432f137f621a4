"""DeBERTa disentangled attention (He et al. 2020), causal.

With relative-position embeddings ``P [2k, d]`` shared by all layers and per-layer projections
``K^r = P W_{k,r}``, ``Q^r = P W_{q,r}`` (split into heads), the score of query ``i``, key ``j`` is

    A_ij = (Q^c_i . K^c_j  +  Q^c_i . K^r_{d(i,j)}  +  K^c_j . Q^r_{d(j,i)}) / sqrt(3 d_h)
             content->content   content->position     position->content

with the relative distance ``d(i,j) = clip(i - j + k, 0, 2k - 1)`` (the paper's delta). With
``position_buckets > 0`` distances first go through DeBERTa-v2's log buckets (exact up to
``position_buckets / 2``, log-spaced up to ``max_relative_positions``) and the table has
``2 * position_buckets`` rows. Causal attention only looks back (``i >= j``), so
``d(i, j) >= k`` and ``d(j, i) <= k``: each term uses its own half of the table.

At consecutive positions (the usual case) both terms are read by distance
(:mod:`posx.kernels.disentangled`), on float32 CPU tensors by one of two fast paths: a layer
whose queries fit one block (training at the usual lengths, short evaluations) is one autograd
node, ``DisentangledAttention``; a longer evaluation takes the keys from the saturation distance
back through one fused causal call and the nearer ones as a band
(:func:`~posx.kernels.near_band.near_band_attend`). Everything else
(training in several blocks, other dtypes and devices) takes
:func:`~posx.kernels.blocked.blocked_attend` with the same terms, and positions that are not
consecutive gather each pair's row of the table.

With ``model.attention_kernel=flex`` (opt-in) the same attention runs in FlexAttention
(:meth:`DeBERTa.layer_flex_scores`): c2p as a per-query table ``q_i . K^r`` and p2c as a per-key
table ``k_j . Q^r`` (``[b, h, s, 2 span]`` each), read by a ``score_mod`` at the rows of the
pair's distance.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from posx.encodings.deberta_buckets import deberta_index, saturation_distance
from posx.encodings.per_layer import PerLayer
from posx.kernels.band_terms import BandTerms
from posx.kernels.blocked import FarKeys, ScoresFn, blocked_attend
from posx.kernels.budget import block_budget, query_block
from posx.kernels.disentangled import (
    AddTerms,
    DisentangledAttention,
    shifted_terms,
)
from posx.kernels.flex.tables import FlexScores, RelativeTables, table_score_mod
from posx.kernels.near_band import near_band_attend
from posx.kernels.relative import (
    consecutive_positions,
    per_query,
)


def _fast_inputs(q: Tensor, k: Tensor, v: Tensor) -> bool:
    """Whether the layer may take :class:`DisentangledAttention` or :meth:`DeBERTa._band_attend`:
    float32 on the CPU, where they were measured (the band's fused kernel is the CPU's; CUDA
    trains under bf16 autocast)."""
    return all(t.dtype == torch.float32 and t.device.type == "cpu" for t in (q, k, v))


class DebertaProjections(nn.Module):
    """One layer's parameter set: the position projections ``W_{k,r}``, ``W_{q,r}``."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.key_proj = nn.Linear(d_model, d_model, bias=False)
        self.query_proj = nn.Linear(d_model, d_model, bias=False)
        for proj in (self.key_proj, self.query_proj):
            nn.init.normal_(proj.weight, std=0.02)


class DeBERTa(PerLayer):
    """Disentangled attention: ``P`` shared by layers, position projections per layer.

    Args:
        d_model: Model width (from the model).
        n_heads: Heads (from the model).
        n_layers: Layers (from the model).
        max_relative_positions: Clipping distance ``k`` (table rows ``2k``).
        position_buckets: ``0`` (v1: clip only) or a log-bucket count (v2, e.g. 256).
        block_size: Queries per attention block (the yaml ties it to ``model.attn_block_size``).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_layers: int,
        max_relative_positions: int = 128,
        position_buckets: int = 0,
        block_size: int = 256,
    ) -> None:
        super().__init__(n_layers, per_layer=True)  # P is shared, its projections per layer
        if max_relative_positions < 1:
            raise ValueError(
                f"deberta max_relative_positions must be >= 1, got {max_relative_positions}"
            )
        if position_buckets and (
            position_buckets < 4
            or position_buckets % 2
            or max_relative_positions <= position_buckets // 2 + 1
        ):
            raise ValueError(
                "deberta position_buckets must be 0 or an even number >= 4 with "
                f"max_relative_positions > position_buckets/2 + 1, got {position_buckets} "
                f"and {max_relative_positions}"
            )
        self.max_relative_positions, self.position_buckets = (
            max_relative_positions,
            position_buckets,
        )
        self.n_heads, self.block_size = n_heads, block_size
        span = position_buckets or max_relative_positions
        self.rel_embeddings = nn.Embedding(2 * span, d_model)
        nn.init.normal_(self.rel_embeddings.weight, std=0.02)
        self.layers = nn.ModuleList(DebertaProjections(d_model) for _ in range(self.n_sets))
        self.far_distance = saturation_distance(max_relative_positions, position_buckets)

    def _heads(self, x: Tensor) -> Tensor:
        """``[2k, d] -> [h, 2k, d_h]``."""
        return x.view(x.shape[0], self.n_heads, -1).transpose(0, 1)

    def layer_attend(
        self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int
    ) -> Tensor:
        projections = self.layers[layer]
        rel = self.rel_embeddings.weight  # [2span, d]
        k_r = self._heads(projections.key_proj(rel)).to(q.dtype)  # [h, 2span, d_h]
        q_r = self._heads(projections.query_proj(rel)).to(q.dtype)
        scale = (3 * q.shape[-1]) ** -0.5
        span, buckets = self.max_relative_positions, self.position_buckets
        consecutive = consecutive_positions(q_pos, k_pos)
        if consecutive and _fast_inputs(q, k, v):
            if self._one_block(q):
                a, b_ = self._distance_rows(k.shape[-2], k_r, q_r * scale)
                return DisentangledAttention.apply(q, k, v, a, b_, scale)
            if not torch.is_grad_enabled():
                return self._band_attend(q, k, v, k_r, q_r, scale)
        # The scale folded into both query sides (each term is linear in one of them); keys
        # and K^r transposed once rather than copied transposed in every block's matmul.
        q_scaled, q_r_scaled = q * scale, q_r * scale
        k_t, k_r_t = k.transpose(-1, -2).contiguous(), k_r.transpose(-1, -2).contiguous()
        if consecutive:
            scores = self._shifted_scores(q_scaled, k, k_t, k_r, q_r_scaled)
            return blocked_attend(
                v, scores, self.block_size, far=self._far(q, k, q_r, k_r, q_pos, k_pos, scale)
            )
        # p2c's K^c_j . Q^r_r for every key at once, key-major ([b, h, s, 2span]: linear in s),
        # when it fits the block budget; per block it was recomputed for all 2span rows over
        # keys that the next blocks' bands share. Key-major, each key's gather reads one row.
        b, h, s, _ = k.shape
        fits = b * h * q_r.shape[-2] * s <= block_budget(k.device).bias
        p2c_all = k @ q_r_scaled.transpose(-1, -2) if fits else None

        def scores(i0: int, i1: int, j0: int) -> tuple[Tensor, None]:
            qb = q_scaled[..., i0:i1, :]
            qp, kp = q_pos[..., i0:i1], k_pos[..., j0:i1]
            content = qb @ k_t[..., j0:i1]  # [b, h, bq, i1 - j0]
            idx = deberta_index(qp, kp, span, buckets)
            content += torch.gather(qb @ k_r_t, -1, per_query(idx, content))  # c2p
            # p2c needs delta(j, i): the distance seen from the key, read from the key's row.
            idx_t = deberta_index(kp, qp, span, buckets)  # [(b,) i1 - j0, bq]
            if p2c_all is None:  # Q^r_r . K^c_j: [b, h, 2span, i1 - j0]
                p2c_keys = q_r_scaled @ k_t[..., j0:i1]
                p2c = torch.gather(p2c_keys, -2, per_query(idx_t.transpose(-1, -2), content))
            else:  # [b, h, i1 - j0, bq], transposed
                key_rows = p2c_all[..., j0:i1, :]
                p2c = torch.gather(key_rows, -1, per_query(idx_t, key_rows)).transpose(-1, -2)
            return content.add_(p2c), None

        return blocked_attend(
            v, scores, self.block_size, far=self._far(q, k, q_r, k_r, q_pos, k_pos, scale)
        )

    def layer_flex_scores(
        self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int
    ) -> FlexScores | None:
        """Set ``layer``'s attention as FlexAttention runs it, at integer positions (else
        ``None``: :meth:`layer_attend`).

        c2p ``q_i . K^r`` and p2c ``k_j . Q^r`` for every row of the table, ``[b, h, s, 2 span]``
        each (times the scale); the ``score_mod`` reads c2p at row ``delta(i, j)`` and p2c at
        ``delta(j, i)``, both looked up by the distance ``i - j``, clamped to
        ``+-far_distance`` (beyond it neither row changes).
        """
        if q_pos.is_floating_point() or k_pos.is_floating_point():
            return None
        projections = self.layers[layer]
        rel = self.rel_embeddings.weight  # [2span, d]
        k_r = self._heads(projections.key_proj(rel)).to(q.dtype)  # [h, 2span, d_h]
        q_r = self._heads(projections.query_proj(rel)).to(q.dtype)
        scale = (3 * q.shape[-1]) ** -0.5
        reach = self.far_distance
        distance = torch.arange(-reach, reach + 1, device=q.device)
        tables = RelativeTables(
            reach,
            query_table=(q @ k_r.transpose(-1, -2)) * scale,  # c2p [b, h, s, 2span]
            query_rows=self._c2p_rows(distance),
            key_table=(k @ q_r.transpose(-1, -2)) * scale,  # p2c [b, h, s, 2span]
            key_rows=self._p2c_rows(distance),
        )
        return FlexScores(q, k, scale, table_score_mod(q_pos, k_pos, tables))

    def _one_block(self, q: Tensor) -> bool:
        """Whether one query block (what :func:`blocked_attend` would make of the layer) holds
        every query: then :class:`DisentangledAttention` takes it."""
        b, h, s, _ = q.shape
        budget = block_budget(q.device)
        return query_block(budget.queries(self.block_size), b, h, s, budget.attend) >= s

    def _distance_rows(self, s: int, k_r: Tensor, q_r_scaled: Tensor) -> tuple[Tensor, Tensor]:
        """``K^r`` at distances ``s - 1`` down to ``-1`` and ``Q^r`` (scaled) at ``0`` up to
        ``s``, each ``[h, s + 1, d_h]``: the tables of :class:`DisentangledAttention`."""
        c2p_rows = self._c2p_rows(torch.arange(s - 1, -2, -1, device=k_r.device))
        p2c_rows = self._p2c_rows(torch.arange(s + 1, device=k_r.device))
        return k_r[:, c2p_rows], q_r_scaled[:, p2c_rows]

    def _c2p_rows(self, distance: Tensor) -> Tensor:
        """Table rows ``delta(i, j)`` of the query side (c2p) at distances ``i - j``:
        ``[n] -> [n]``."""
        zero = distance.new_zeros(1)
        span, buckets = self.max_relative_positions, self.position_buckets
        return deberta_index(distance, zero, span, buckets).squeeze(-1)

    def _p2c_rows(self, distance: Tensor) -> Tensor:
        """Table rows ``delta(j, i)`` of the key side (p2c) at distances ``i - j``:
        ``[n] -> [n]``."""
        zero = distance.new_zeros(1)
        span, buckets = self.max_relative_positions, self.position_buckets
        return deberta_index(zero, distance, span, buckets).squeeze(0)

    def _band_attend(
        self, q: Tensor, k: Tensor, v: Tensor, k_r: Tensor, q_r: Tensor, scale: float
    ) -> Tensor:
        """Evaluation at consecutive positions: the keys from ``far_distance`` back in one
        fused causal call, the nearer ones as a band (:func:`near_band_attend`).

        From ``far_distance`` on both terms are constant: c2p's ``q_i . K^r_last`` is one
        number per query (the softmax drops it) and p2c's ``k_j . Q^r_0`` is folded into the
        queries (``q + Q^r_0``). The band adds ``K^r - K^r_last`` to the queries' side and
        ``Q^r - Q^r_0`` to the keys', less ``Q^r_0 . (K^r - K^r_last)``, which the shifted
        queries bring to the first.
        """
        n = min(self.far_distance, q.shape[-2])
        distance = torch.arange(n - 1, -1, -1, device=k.device)  # band row m: n - 1 - m
        q_r0 = q_r[:, :1]  # [h, 1, d_h]
        a = k_r[:, self._c2p_rows(distance)] - k_r[:, -1:]  # [h, n, d_h]
        terms = BandTerms(
            query_rows=a,
            key_rows=(q_r[:, self._p2c_rows(distance)] - q_r0) * scale,
            bias=(a @ q_r0.transpose(-1, -2)).squeeze(-1) * -scale,
        )
        return near_band_attend(q + q_r0, k, v, scale, n, terms)

    def _far(
        self,
        q: Tensor,
        k: Tensor,
        q_r: Tensor,
        k_r: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        scale: float,
    ) -> Callable[[], FarKeys]:
        """From ``far_distance`` on, ``delta(i, j)`` is the last row and ``delta(j, i)`` the
        first: c2p is ``q_i . K^r_last`` per query, p2c is ``K^c_j . Q^r_0``, folded into the
        queries."""

        def far() -> FarKeys:
            return FarKeys(
                distance=self.far_distance,
                q=q + q_r[:, :1],
                k=k,
                scale=scale,
                q_pos=q_pos,
                k_pos=k_pos,
                logit_offset=(q @ k_r[:, -1:].transpose(-1, -2)).squeeze(-1) * scale,
            )

        return far

    def _shifted_scores(
        self, q_scaled: Tensor, k: Tensor, k_t: Tensor, k_r: Tensor, q_r_scaled: Tensor
    ) -> ScoresFn:
        """Block scores at consecutive positions: the content product plus
        :meth:`_relative_terms` (c2p and p2c as shifted views, no gathers)."""
        add_terms = self._relative_terms(q_scaled, k, k_r, q_r_scaled)

        def scores(i0: int, i1: int, j0: int) -> tuple[Tensor, None]:
            content = q_scaled[..., i0:i1, :] @ k_t[..., j0:i1]  # [b, h, bq, i1 - j0]
            add_terms(i0, i1, j0, content)
            return content, None

        return scores

    def _relative_terms(self, q_c2p: Tensor, k: Tensor, k_r: Tensor, q_r: Tensor) -> AddTerms:
        """c2p (``q_c2p . K^r``) and p2c (``k . Q^r``) of a block at consecutive positions
        (:func:`shifted_terms`), from ``K^r`` and ``Q^r`` laid out once per layer by distance
        (``O(s d)``): every pair's distance, future pairs included, lies in ``[-s, s - 1]``."""
        s = k.shape[-2]
        distance = torch.arange(s - 1, -s - 1, -1, device=k.device)  # s - 1 down to -s
        c2p_rows, p2c_rows = self._c2p_rows(distance), self._p2c_rows(distance[:-1].flip(0))
        k_r_t = k_r[:, c2p_rows].transpose(-1, -2).contiguous()  # [h, d_h, 2s]
        q_r_t = q_r[:, p2c_rows].transpose(-1, -2).contiguous()  # [h, d_h, 2s - 1]
        return shifted_terms(q_c2p, k, k_r_t, q_r_t)

    def extra_repr(self) -> str:
        return f"k={self.max_relative_positions}, buckets={self.position_buckets}"
