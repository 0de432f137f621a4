"""Contextual Position Encoding, CoPE (Golovneva et al. 2024).

Positions are counted by the context instead of by token index: a gate ``g_it = sigmoid(q_i.k_t
/ sqrt(d_h))`` decides whether token ``t`` counts for query ``i``, and key ``j`` sits at the
fractional position ``p_ij = sum_{t=j..i} g_it``. Its embedding is interpolated between the
learned integer embeddings, ``e[p] = (p - floor p) e[ceil p] + (1 - p + floor p) e[floor p]``,
and ``q_i . e[p_ij]`` is added to the logit (computed as in the paper's code: ``q . e`` for every
integer position, then interpolated). Positions are capped at ``npos_max - 1``.

posx positions: with the default ``pos = arange(s)`` this is exactly the paper. Training-time
strategies (randomized, PoSE) leave gaps between positions; with ``gap_weighted`` (default) a
token ``t > j`` counts ``g_it * (pos_t - pos_{t-1})`` (the key itself counts ``g_ij``), so with
every gate open ``p_ij = pos_i - pos_j + 1``, the relative position. ``gap_weighted=false``
ignores ``pos`` entirely, as in the paper.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posx.encodings.base import as_float
from posx.encodings.blocked import blocked_attend, future_mask
from posx.encodings.per_layer import PerLayer


def cope_positions(gates: Tensor, gaps: Tensor | None = None) -> Tensor:
    """``p_ij = g_ij + sum_{t=j+1..i} g_it * gap_t`` (``gap = 1``: the paper's suffix sum).

    Args:
        gates: ``[b, h, sq, sk]`` in ``[0, 1]``, zero for keys after the query.
        gaps: Position step into each key ``[sk]`` or ``[b, sk]``; ``None`` for all ones.

    Returns:
        Fractional positions ``[b, h, sq, sk]``.
    """
    if gaps is None:
        return gates.flip(-1).cumsum(-1).flip(-1)
    if gaps.dim() == 2:
        gaps = gaps[:, None, None, :]
    weighted = gates * gaps
    return weighted.flip(-1).cumsum(-1).flip(-1) - weighted + gates


def position_gaps(pos: Tensor) -> Tensor:
    """``pos_t - pos_{t-1}`` with the first token's gap set to 1. ``[.., s] -> [.., s]``."""
    pos = as_float(pos)
    first = torch.ones_like(pos[..., :1])
    return torch.cat((first, pos[..., 1:] - pos[..., :-1]), dim=-1)


def interpolate_logits(logits_int: Tensor, positions: Tensor) -> Tensor:
    """Linear interpolation of per-integer-position logits at fractional positions.

    Args:
        logits_int: ``q . e[n]`` for ``n = 0..npos_max-1``: ``[b, h, sq, npos_max]``.
        positions: ``[b, h, sq, sk]`` in ``[0, npos_max - 1]``.

    Returns:
        ``[b, h, sq, sk]``.
    """
    floor = positions.floor()
    w = positions - floor
    lo = torch.gather(logits_int, -1, floor.long())
    hi = torch.gather(logits_int, -1, positions.ceil().long())
    return hi * w + lo * (1 - w)


class CoPEEmbeddings(nn.Module):
    """One parameter set: position embeddings ``e [d_h, npos_max]`` (shared by heads, as in
    the paper)."""

    def __init__(self, head_dim: int, npos_max: int) -> None:
        super().__init__()
        # The reference code starts from zeros; a small random start gives every position a
        # distinct embedding from step 0 (and makes the contract tests see the encoding).
        self.pos_emb = nn.Parameter(torch.randn(head_dim, npos_max) * 0.02)


class CoPE(PerLayer):
    """CoPE in every layer, each with its own position embeddings (paper) or one shared set.

    Args:
        head_dim: Per-head width (from the model).
        n_layers: Layers (from the model).
        train_length: Training length (from the model): the default ``npos_max``.
        npos_max: Integer positions with an embedding; fractional positions above the last
            one are clamped to it. ``None``: ``train_length``.
        per_layer: Separate embeddings per layer (paper) or shared.
        gap_weighted: Weight gates by explicit position gaps (module docstring).
        block_size: Queries per attention block (the yaml ties it to ``model.attn_block_size``).
    """

    def __init__(
        self,
        head_dim: int,
        n_layers: int,
        train_length: int,
        npos_max: int | None = None,
        per_layer: bool = True,
        gap_weighted: bool = True,
        block_size: int = 256,
    ) -> None:
        super().__init__(n_layers, per_layer)
        npos_max = train_length if npos_max is None else npos_max
        if npos_max < 2:
            raise ValueError(f"cope npos_max must be >= 2, got {npos_max}")
        self.npos_max, self.gap_weighted, self.block_size = npos_max, gap_weighted, block_size
        self.layers = nn.ModuleList(CoPEEmbeddings(head_dim, npos_max) for _ in range(self.n_sets))

    def layer_attend(
        self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int
    ) -> Tensor:
        scale = q.shape[-1] ** -0.5
        gaps = position_gaps(k_pos) if self.gap_weighted else None
        emb = self.layers[layer].pos_emb.float()

        def scores(i0: int, i1: int, j0: int) -> tuple[Tensor, None]:
            # p_ij sums gates over keys [j, i] only, so keys [j0, i1) need nothing before j0.
            qb = q[..., i0:i1, :].float()
            logits = (qb @ k[..., j0:i1, :].float().transpose(-1, -2)) * scale  # [b,h,bq,i1-j0]
            gates = torch.sigmoid(logits).masked_fill(future_mask(i0, i1, q.device, j0), 0.0)
            positions = cope_positions(gates, None if gaps is None else gaps[..., j0:i1])
            positions = positions.clamp(0, self.npos_max - 1)
            return logits + interpolate_logits(qb @ emb, positions), None

        return blocked_attend(v, scores, self.block_size)

    def extra_repr(self) -> str:
        return f"npos_max={self.npos_max}, gap_weighted={self.gap_weighted}, {super().extra_repr()}"
