"""CoPE's per-layer pieces: the interpolation table of position logits, the positions as
suffix sums of gates, and one layer's inputs laid out for the routes of
:mod:`posx.kernels.cope.attention`.

Keys are laid out last to first once per layer (``k.flip(-2)``): the suffix sums over keys that
give the positions are then plain cumulative sums along the last dim, and nothing is flipped
back (the softmax and the value product do not depend on the order of the keys).
"""

from __future__ import annotations

import torch
from torch import Tensor

from posx.kernels import budget as budgets
from posx.kernels.blocked import future_bias
from posx.kernels.budget import query_block


def logits_table(logits_int: Tensor) -> Tensor:
    """Each integer position's logit and the step to the next one, as one complex number.

    ``interp(L, p) = L[n] + (p - n) (L[n + 1] - L[n])`` with ``n = floor p`` reads both numbers
    at ``n``: packed as ``L[n] + i step[n]`` that is one gather instead of two (the last step
    is 0, where ``p - n`` is 0 too: exact).

    Args:
        logits_int: ``q . e[n]`` for ``n = 0..npos_max-1``: ``[.., npos_max]``.

    Returns:
        ``[.., npos_max]`` complex.
    """
    steps = torch.cat((logits_int.diff(dim=-1), torch.zeros_like(logits_int[..., :1])), dim=-1)
    return torch.complex(logits_int, steps)


def table_weights(emb: Tensor) -> Tensor:
    """The embeddings and their steps, interleaved: ``[d_h, 2 npos_max]`` with columns
    ``e[0], e[1] - e[0], e[1], e[2] - e[1], .., e[top], 0``.

    ``q`` times it is :func:`logits_table` of ``q e`` as real and imaginary parts, in one
    product (the steps as ``q . (e[n + 1] - e[n])``: the same up to rounding).
    """
    steps = torch.cat((emb.diff(dim=-1), torch.zeros_like(emb[:, :1])), dim=-1)
    return torch.stack((emb, steps), dim=-1).flatten(-2)


def interpolation_table(q: Tensor, weights: Tensor) -> Tensor:
    """:func:`logits_table` of ``q e`` from :func:`table_weights` (or its first columns):
    ``[.., bq, d_h] -> [.., bq, columns / 2]`` complex."""
    # one product of [queries, d_h] rows (4-D @ 2-D on a block's slice of q went through a
    # batched product of broadcast weights)
    table = q.reshape(-1, q.shape[-1]) @ weights
    return torch.view_as_complex(table.view(*q.shape[:-1], -1, 2))


def interpolate(table: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The pieces of ``L[n] + (p - n) step[n]`` at ``n = floor p``: the caller adds them up
    where the result is to go (``torch.addcmul(lo, frac, step)``).

    Args:
        table: :func:`logits_table` ``[.., npos_max]``.
        positions: ``[.., keys]`` in ``[0, npos_max - 1]``; overwritten by ``p - n``.

    Returns:
        ``n`` (int64), ``p - n`` (``positions`` itself), ``L[n]`` and ``step[n]`` (strided
        views of one gathered tensor), each ``[.., keys]``.
    """
    below = positions.long()  # floor: positions are >= 0
    pairs = torch.view_as_real(torch.gather(table, -1, below))  # [.., keys, 2]
    return below, positions.frac_(), pairs[..., 0], pairs[..., 1]


def suffix_positions(gates: Tensor, gaps: Tensor | None = None) -> Tensor:
    """Positions of keys laid out last to first (unclamped), as a new tensor.

    ``p = cumsum(g)``: the suffix sums of the keys in their order, as plain cumulative sums
    (same additions, same order, no flips). With gaps, ``cumsum(g gap) - g gap + g``: the key
    itself counts its gate, every token after it its gate times its gap.

    Args:
        gates: ``[b, h, bq, keys]``, keys last to first.
        gaps: ``[keys]`` or ``[b, keys]``, keys last to first, or ``None`` for unit gaps.

    Returns:
        ``[b, h, bq, keys]``.
    """
    if gaps is None:
        return gates.cumsum(-1)
    if gaps.dim() == 2:
        gaps = gaps[:, None, None, :]
    weighted = gates * gaps
    return weighted.cumsum(-1).sub_(weighted).add_(gates)


class CoPELayer:
    """One layer's inputs, laid out once: queries contiguous, keys and values last to first."""

    def __init__(
        self, q: Tensor, k: Tensor, v: Tensor, emb: Tensor, gaps: Tensor | None, npos_max: int
    ) -> None:
        self.q, self.emb, self.top = q.contiguous(), emb, npos_max - 1
        self.weights = table_weights(emb)
        self.s = q.shape[-2]
        self.scale = q.shape[-1] ** -0.5
        self.k = k.flip(-2)  # [b, h, s, d_h], keys last to first
        self.v = v.flip(-2)
        self.gaps = None if gaps is None else gaps.flip(-1)

    def keys(self, j0: int, i1: int) -> tuple[Tensor, Tensor]:
        """Keys and values ``[j0, i1)``, last to first."""
        return self.k[..., self.s - i1 : self.s - j0, :], self.v[..., self.s - i1 : self.s - j0, :]

    def block_gaps(self, i1: int) -> Tensor | None:
        """Gaps of keys ``[0, i1)``, last to first."""
        return None if self.gaps is None else self.gaps[..., self.s - i1 :]

    def columns(self, i1: int) -> int:
        """Integer positions that queries with keys ``[0, i1)`` can reach: with unit gaps a
        position sums at most ``i1`` gates, each at most 1."""
        return self.top + 1 if self.gaps is not None else min(self.top, i1) + 1

    def table(self, q: Tensor, i1: int) -> Tensor:
        """:func:`interpolation_table` of queries ``q`` of a block with keys ``[0, i1)``."""
        return interpolation_table(q, self.weights[:, : 2 * self.columns(i1)])


class FutureMasks(dict):
    """``-inf`` where a key comes after the query, ``[bq, bq]`` keys last to first, by ``bq``."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device = device

    def __missing__(self, bq: int) -> Tensor:
        self[bq] = future_bias(0, bq, self.device).flip(-1)
        return self[bq]


def block_elements(device: torch.device | None = None) -> int:
    """Most scores ``[b, h, queries, keys]`` in one block on ``device`` (default the CPU): the
    device's ``cope`` budget (:func:`~posx.kernels.budget.block_budget`). On the CPU a quarter
    of blocked attention's budget (``ATTEND_BLOCK_ELEMENTS``, read when called), 2^18 float32
    values (1 MiB), which stay in a core's L2 cache between the passes over them; with 2^20 the
    gathers, cumulative sums and scatters ran several times slower per element here (tiny
    model's training step: one layer's attention 21-24 ms against 11.6-13.4 ms)."""
    return budgets.block_budget(torch.device("cpu") if device is None else device).cope


def query_blocks(layer: CoPELayer, block_size: int) -> list[tuple[int, int]]:
    """Query blocks ``(i0, i1)``, last first, each with at most :func:`block_elements` scores
    against its keys ``[0, i1)`` (on CUDA: as many queries as that allows, see
    :meth:`~posx.kernels.budget.BlockBudget.queries`).

    Last first: the last block's temporaries are the largest, so each later one fits in memory
    the allocator already holds (see ``blocked_attend``).
    """
    b, h, s, _ = layer.q.shape
    budget = budgets.block_budget(layer.q.device)
    blocks, i1, block_size = [], s, budget.queries(block_size)
    while i1 > 0:
        bq = min(query_block(block_size, b, h, i1, budget.cope), i1)
        blocks.append((i1 - bq, i1))
        i1 -= bq
    return blocks
