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
from posx.encodings.per_layer import PerLayer
from posx.kernels.cope.attention import cope_attention
from posx.kernels.cope.layer import interpolate, logits_table, suffix_positions


def cope_positions(gates: Tensor, gaps: Tensor | None = None) -> Tensor:
    """``p_ij = g_ij + sum_{t=j+1..i} g_it * gap_t`` (``gap = 1``: the paper's suffix sum).

    Args:
        gates: ``[b, h, sq, sk]`` in ``[0, 1]``, zero for keys after the query.
        gaps: Position step into each key ``[sk]`` or ``[b, sk]``; ``None`` for all ones.

    Returns:
        Fractional positions ``[b, h, sq, sk]``.
    """
    reversed_gaps = None if gaps is None else gaps.flip(-1)
    return suffix_positions(gates.flip(-1), reversed_gaps).flip(-1)


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
    _, frac, lo, steps = interpolate(logits_table(logits_int), positions.clone())
    return torch.addcmul(lo, frac, steps)


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

    # Gates, their cumulative sums and the interpolated position logits: ~77 bytes per score
    # and layer kept in training, ~100 per block score in evaluation (measured on CPU).
    score_bytes = 96
    block_score_bytes = 128

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

    def decayed_parameter_names(self) -> set[str]:
        # embedding tables, decayed like the token embedding
        return {f"layers.{i}.pos_emb" for i in range(len(self.layers))}

    def layer_attend(
        self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int
    ) -> Tensor:
        gaps = position_gaps(k_pos) if self.gap_weighted else None
        if gaps is not None and bool((gaps == 1).all()):
            gaps = None  # unit gaps weigh nothing: the plain cumulative sum, three passes fewer
        emb = self.layers[layer].pos_emb
        return cope_attention(q, k, v, emb, self.npos_max, gaps, self.block_size)

    def extra_repr(self) -> str:
        return f"npos_max={self.npos_max}, gap_weighted={self.gap_weighted}, {super().extra_repr()}"
