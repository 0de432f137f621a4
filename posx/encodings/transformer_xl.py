"""Transformer-XL relative positional encoding (Dai et al. 2019), without segment recurrence.

The score between query ``i`` and key ``j`` has the paper's four terms (per head, ``q = W_q x``,
``k = W_k x``, ``R`` the sinusoid of the distance ``i - j``, ``W_R`` a per-layer projection):

    A_ij = q_i.k_j  +  q_i.W_R R_{i-j}  +  u.k_j  +  v.W_R R_{i-j}
           (a) content  (b) content->pos  (c) global content bias  (d) global position bias

scaled by ``1/sqrt(d_h)``. Terms (b) + (d) equal ``c_i . R_{i-j}`` with ``c_i = W_R^T (q_i + v)``,
and since ``R`` is made of ``sin/cos((i - j) w)``, the angle-difference identities split it into a
query feature of position ``i`` dotted with a key feature ``[cos(j w), sin(j w)]`` of position
``j``. Appending those features to ``q + u`` and ``k`` turns the whole score into one dot
product, computed query-blocked (``posx.kernels.blocked``): exact, O(s) memory, any (float)
positions. The price is the width of that dot product, ``d_h + r_dim`` instead of ``d_h``.

When every position is an integer a cheaper exact route is taken: the distinct distances of a
query block are few (about the block's key count), so ``P_d = W_R R_d`` is computed once per
distance and terms (b) + (d) are ``(q_i + v) . P_{i-j}``, a ``d_h``-wide product per (query,
distance) read back per pair, as Shaw's relative scores are. At consecutive positions (the usual
case) each pair's column of that product is fixed by its offset from the diagonal, so it is read
as a strided view (the paper code's "relative shift", without its padding and copy) instead of a
gather.

With ``model.attention_kernel=flex`` (opt-in) the feature form runs in FlexAttention
(:meth:`TransformerXL.layer_flex_scores`): queries and keys ``d_h + r_dim`` wide, values
``d_h``, no ``score_mod``; exact at any positions, memory linear in ``s``. (Distances are not
bounded, so a per-query table by distance would be ``[s, s]``.)
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posx.encodings.base import relative_distance
from posx.encodings.per_layer import PerLayer
from posx.kernels.blocked import (
    BiasFn,
    ScoresFn,
    blocked_attend,
    blocked_bias_sdpa,
    sdpa_query_block,
)
from posx.kernels.flex.tables import FlexScores
from posx.kernels.memo import PositionMemo
from posx.kernels.relative import consecutive_positions, gather_relative, relative_shift


def xl_sinusoid(distance: Tensor, dim: int) -> Tensor:
    """Transformer-XL's ``R``: ``[sin(d w), cos(d w)]`` concatenated, ``w_f = 10000^(-2f/dim)``.

    Args:
        distance: Distances ``[...]`` (float allowed).
        dim: Width of ``R`` (even).

    Returns:
        ``[..., dim]`` float32.
    """
    angles = distance.double().unsqueeze(-1) * xl_inv_freq(dim, distance.device)
    return torch.cat((angles.sin(), angles.cos()), dim=-1).float()


def xl_inv_freq(dim: int, device: torch.device) -> Tensor:
    """The sinusoid's frequencies ``w_f = 10000^(-2f/dim)`` ``[dim/2]``, float64 on ``device``."""
    return 10000.0 ** (-torch.arange(0, dim, 2, device=device, dtype=torch.float64) / dim)


def _trig(pos: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """``sin`` and ``cos`` of ``pos * w`` ``[.., s, dim/2]``; angles in float64 so that large
    positions lose no precision before the products below cancel them back to ``i - j``."""
    angles = pos.double().unsqueeze(-1) * xl_inv_freq(dim, pos.device)
    return angles.sin().float(), angles.cos().float()


def distance_span(q_pos: Tensor, k_pos: Tensor, most: int | None = None) -> tuple[int, int] | None:
    """The least and greatest distance ``q_pos[i] - k_pos[j]`` over causal pairs ``j <= i``,
    when every position is an integer (else ``None``), and at most ``most`` distances apart
    (default ``4 s + 1024``: a table of them stays linear in ``s``).

    Args:
        q_pos: Query positions ``[s]`` or ``[b, s]``.
        k_pos: Key positions ``[s]`` or ``[b, s]`` (the same tokens, by index).
        most: Number of distances the span must stay under (``hi - lo < most``), else the
            result is ``None``; ``None``: ``4 s + 1024``.
    """
    if q_pos.is_floating_point() and not (
        torch.equal(q_pos, q_pos.round()) and torch.equal(k_pos, k_pos.round())
    ):
        return None
    # For query i the visible keys are j <= i: the nearest and furthest by running max / min.
    nearest = q_pos - torch.cummax(k_pos, dim=-1).values
    furthest = q_pos - torch.cummin(k_pos, dim=-1).values
    lo, hi = int(nearest.min()), int(furthest.max())
    most = 4 * q_pos.shape[-1] + 1024 if most is None else most
    return (lo, hi) if hi - lo < most else None


def _per_head(feature: Tensor) -> Tensor:
    """``[s, f]`` or ``[b, s, f]`` -> ``[1 or b, 1, s, f]`` (broadcast over heads)."""
    return feature.unsqueeze(0).unsqueeze(0) if feature.dim() == 2 else feature.unsqueeze(1)


class XLProjection(nn.Module):
    """One layer's parameter set: the projection ``W_R [h, d_h, r_dim]`` of the sinusoid."""

    def __init__(self, n_heads: int, head_dim: int, r_dim: int) -> None:
        super().__init__()
        self.w_r = nn.Parameter(torch.randn(n_heads, head_dim, r_dim) * 0.02)


class TransformerXL(PerLayer):
    """Transformer-XL's relative attention: ``W_R`` per layer, ``u``/``v`` shared or per layer.

    Args:
        n_heads: Heads (from the model).
        head_dim: Per-head width (from the model).
        d_model: Model width (from the model): the default width of ``R``.
        n_layers: Number of layers (from the model).
        r_dim: Width of the relative sinusoid ``R`` (``None``: ``d_model``; even).
        share_uv: One ``u``, ``v`` for all layers (the paper's formula and its default code)
            or one pair per layer (``untie_r`` in the reference code).
        block_size: Most queries per attention block (the yaml ties it to
            ``model.attn_block_size``).
    """

    # Attention runs in query blocks (blocked_attend), so evaluation holds one block's scores
    # with their temporaries (the base class's block_score_bytes); training keeps ~16 bytes per
    # causal score and layer (measured on CPU when it built the whole matrix), 20 with margin.
    score_bytes = 20

    def __init__(
        self,
        n_heads: int,
        head_dim: int,
        d_model: int,
        n_layers: int,
        r_dim: int | None = None,
        share_uv: bool = True,
        block_size: int = 256,
    ) -> None:
        super().__init__(n_layers, per_layer=True)  # W_R is always per layer
        r_dim = d_model if r_dim is None else r_dim
        if r_dim <= 0 or r_dim % 2:
            raise ValueError(f"transformer_xl r_dim must be a positive even number, got {r_dim}")
        self.r_dim, self.share_uv, self.block_size = r_dim, share_uv, block_size
        n_uv = 1 if share_uv else n_layers
        self.u = nn.Parameter(torch.randn(n_uv, n_heads, head_dim) * 0.02)
        self.v = nn.Parameter(torch.randn(n_uv, n_heads, head_dim) * 0.02)
        self.layers = nn.ModuleList(
            XLProjection(n_heads, head_dim, r_dim) for _ in range(self.n_sets)
        )
        # Evaluation's per-distance tables P_d = W_R R_d, one per layer and length: every
        # forward at one length rebuilds the same ones (an [h d_h, r_dim] x [r_dim, s] product:
        # 5 ms a layer for the small model at 1,024 tokens).
        self._tables = PositionMemo()

    def decayed_parameter_names(self) -> set[str]:
        # W_R is a projection matrix; u and v are biases (not decayed)
        return {f"layers.{i}.w_r" for i in range(len(self.layers))}

    def layer_attend(
        self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int
    ) -> Tensor:
        uv = 0 if self.share_uv else layer
        u, v_bias = self.u[uv].to(q.dtype).unsqueeze(1), self.v[uv].to(q.dtype).unsqueeze(1)
        w_r = self.layers[layer].w_r  # [h, d_h, r_dim]
        span = distance_span(q_pos, k_pos)
        if span is None:
            return self._feature_attend(q, k, v, q_pos, k_pos, layer)
        # The scale folded into the queries (every term is linear in them) and keys transposed
        # once: per block, a scaling pass and a copy of the transposed key slice were measurable.
        scale = q.shape[-1] ** -0.5
        qu, qv = (q + u) * scale, (q + v_bias) * scale
        consecutive = consecutive_positions(q_pos, k_pos)
        needs_grad = torch.is_grad_enabled() and any(
            t.requires_grad for t in (q, k, v, w_r, self.u, self.v)
        )
        if consecutive and not needs_grad:  # evaluation: terms (b) + (d) as SDPA's mask
            b, h, s, _ = q.shape
            step = sdpa_query_block(self.block_size, b, h, s, q.device)
            bias = self._shifted_bias(qv, s, w_r, step)
            return blocked_bias_sdpa(qu, k, v, bias, self.block_size, 1.0, step)
        k_t = k.transpose(-1, -2).contiguous()  # [b, h, d_h, s]
        if consecutive:
            return blocked_attend(v, self._shifted_scores(qu, qv, k_t, w_r), self.block_size)
        # Every distance is an integer in [lo, hi]: P_d = W_R R_d for each, and term (b) + (d)
        # of pair (i, j) is (q_i + v) . P_{d(i, j)}, read from a per-query table.
        lo, hi = span
        table = xl_sinusoid(torch.arange(lo, hi + 1, device=q.device), self.r_dim)
        p_t = torch.einsum("nr,hdr->hdn", table, w_r.float()).to(q.dtype)  # [h, d_h, n]
        q_pos, k_pos = q_pos.long(), k_pos.long()

        def scores(i0: int, i1: int, j0: int) -> tuple[Tensor, None]:
            content = qu[..., i0:i1, :] @ k_t[..., j0:i1]  # (a) + (c)
            row = relative_distance(q_pos[..., i0:i1], k_pos[..., j0:i1]) - lo
            row = row.clamp_(0, hi - lo)  # only future (masked) pairs fall outside
            first, last = int(row.min()), int(row.max())  # the block's slice of the table
            rel = qv[..., i0:i1, :] @ p_t[..., first : last + 1]
            return content.add_(gather_relative(rel, row - first)), None

        return blocked_attend(v, scores, self.block_size)

    def layer_flex_scores(
        self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int
    ) -> FlexScores:
        """Set ``layer``'s attention as FlexAttention runs it: the whole score as one dot
        product of :meth:`_features` (``d_h + r_dim`` wide), at any positions."""
        q2, k2 = self._features(q, k, q_pos, k_pos, layer)
        return FlexScores(q2, k2, q.shape[-1] ** -0.5)

    def _shifted_scores(self, qu: Tensor, qv: Tensor, k_t: Tensor, w_r: Tensor) -> ScoresFn:
        """Block scores for consecutive positions: terms (b) + (d) as a shifted view.

        Every pair's distance, future pairs included, lies in ``[1 - s, s - 1]``. With
        ``P_d`` tabulated from ``s - 1`` down, a block's product with the distances it spans
        holds each pair at a fixed offset per row (:func:`relative_shift`): no index tensor, no
        gather, at the price of ``bq - 1`` more columns in that product.
        """
        s = k_t.shape[-1]
        p_t = self._distance_table(s, w_r, qu.dtype)  # [h, d_h, 2s - 1]

        def scores(i0: int, i1: int, j0: int) -> tuple[Tensor, None]:
            content = qu[..., i0:i1, :] @ k_t[..., j0:i1]  # (a) + (c)
            # distances i1 - 1 - j0 (first query, first key) down to i0 + 1 - i1
            rel = qv[..., i0:i1, :] @ p_t[..., s - i1 + j0 : s - 1 - i0 + i1]
            return content.add_(relative_shift(rel, i1 - j0)), None

        return scores

    def _shifted_bias(self, qv: Tensor, s: int, w_r: Tensor, step: int) -> BiasFn:
        """Terms (b) + (d) of a block at consecutive positions, as :meth:`_shifted_scores`
        reads them (the fused kernel's mask: a view of a product of the block's own), for
        blocks of at most ``step`` queries."""

        # A block reads distances down to 1 - step: the table stops there (not at 1 - s).
        def table() -> Tensor:
            return self._distance_table(s, w_r, qv.dtype, 1 - step)

        # Reused while W_R is unchanged: its version counter moves with every in-place update
        # (an inference tensor has none, and is not reused).
        p_t = (
            table()
            if w_r.is_inference()
            else self._tables.get((w_r.data_ptr(), w_r._version, s, step, qv.dtype), (), table)
        )

        b, h, _, d = qv.shape
        qv_heads = qv.transpose(0, 1)  # [h, b, s, d_h]

        def bias(i0: int, i1: int) -> Tensor:
            # One product per head for the whole batch: [b, h, bq, d_h] @ [h, d_h, n] would
            # broadcast the table over b, copying it for every block (small model, 1,024
            # tokens: 12 ms a forward).
            rows = qv_heads[:, :, i0:i1].reshape(h, b * (i1 - i0), d)
            rel = (rows @ p_t[..., s - i1 : s - 1 - i0 + i1]).view(h, b, i1 - i0, -1)
            # The strided view itself: SDPA reads a mask by its strides (a copy cost 20 %).
            return relative_shift(rel.transpose(0, 1), i1)

        return bias

    def _distance_table(
        self, s: int, w_r: Tensor, dtype: torch.dtype, last: int | None = None
    ) -> Tensor:
        """``P_d = W_R R_d`` for distances ``s - 1`` down to ``last`` (default ``1 - s``):
        ``[h, d_h, s - last]``."""
        last = 1 - s if last is None else last
        table = xl_sinusoid(torch.arange(s - 1, last - 1, -1, device=w_r.device), self.r_dim)
        return torch.einsum("nr,hdr->hdn", table, w_r.float()).to(dtype)

    def _feature_attend(
        self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int
    ) -> Tensor:
        """Any (float) positions: the score as one ``d_h + r_dim`` wide dot product,
        query-blocked (a fused kernel needs ``v`` as wide as ``q2``: zero-padded, twice the
        work of the value product; SDPA's math path would build the ``[b, h, s, s]`` scores)."""
        q2, k2 = self._features(q, k, q_pos, k_pos, layer)
        scale = q.shape[-1] ** -0.5

        def scores(i0: int, i1: int, j0: int) -> tuple[Tensor, None]:
            return (q2[..., i0:i1, :] @ k2[..., j0:i1, :].transpose(-1, -2)) * scale, None

        return blocked_attend(v, scores, self.block_size)

    def _features(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int
    ) -> tuple[Tensor, Tensor]:
        """Queries ``[q + u, q_feat]`` and keys ``[k, k_feat]``, ``[b, h, s, d_h + r_dim]``
        each in ``q``'s dtype, whose dot product is the four-term score (times ``sqrt(d_h)``).

        ``q_feat`` and ``k_feat`` split terms (b) + (d), ``c_i . R_{i - j}`` with
        ``c_i = W_R^T (q_i + v)``, by the angle-difference identities.
        """
        uv = 0 if self.share_uv else layer
        u, v_bias = self.u[uv].to(q.dtype).unsqueeze(1), self.v[uv].to(q.dtype).unsqueeze(1)
        w_r = self.layers[layer].w_r  # [h, d_h, r_dim]
        half = self.r_dim // 2
        c = (q.float() + v_bias.float()) @ w_r.float()  # [b, h, s, r_dim]
        c_sin, c_cos = c[..., :half], c[..., half:]
        sin_i, cos_i = (_per_head(t) for t in _trig(q_pos, self.r_dim))
        sin_j, cos_j = (_per_head(t) for t in _trig(k_pos, self.r_dim))
        # c.R_{i-j} = sum_f cos(j w)(c_sin sin(i w) + c_cos cos(i w))
        #                 + sin(j w)(c_cos sin(i w) - c_sin cos(i w))
        q_feat = torch.cat((c_sin * sin_i + c_cos * cos_i, c_cos * sin_i - c_sin * cos_i), -1)
        k_feat = torch.cat((cos_j, sin_j), -1).expand(*k.shape[:-1], self.r_dim)
        q2 = torch.cat((q + u, q_feat.to(q.dtype)), -1).contiguous()
        k2 = torch.cat((k, k_feat.to(k.dtype)), -1).contiguous()
        return q2, k2

    def extra_repr(self) -> str:
        return f"r_dim={self.r_dim}, share_uv={self.share_uv}"
