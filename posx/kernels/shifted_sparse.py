"""Shifted sparse attention, S²-Attn (Chen et al. 2023, LongLoRA), LongLoRA's training-time
attention.

The sequence of ``s`` tokens is cut into groups of ``G`` (``s`` a multiple of ``G``); every head
attends causally within its token's group. In the second half of the heads the groups are
shifted by ``G / 2``: there token ``t`` belongs to group ``floor((t + G/2) / G)``, so the groups
of the two halves overlap and information passes between neighbouring groups. As in the
reference, the shifted half is computed by rolling its tokens back by ``G / 2`` and running
the same grouped attention; unlike a plain roll, the group that wraps around (the last
``G / 2`` tokens followed by the first ``G / 2``) is cut in two, so no token sees a later one.
With a single group nothing is shifted: it is full causal attention.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def group_ids(s: int, group: int, shifted: bool, device: torch.device | None = None) -> Tensor:
    """The group of each token ``[s]``: ``t // G``, or ``(t + G/2) // G`` for shifted heads
    (shifted only when ``s`` holds more than one group)."""
    t = torch.arange(s, device=device)
    shift = group // 2 if shifted and s > group else 0
    return torch.div(t + shift, group, rounding_mode="floor")


def visible(s: int, group: int, shifted: bool) -> Tensor:
    """Bool ``[s, s]``: key ``j`` is visible to query ``i`` (same group, ``j <= i``)."""
    ids = group_ids(s, group, shifted)
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    return causal & (ids[:, None] == ids[None, :])


def _grouped(q: Tensor, k: Tensor, v: Tensor, group: int, wrap: bool, scale: float | None):
    """Causal attention within consecutive groups of ``group`` tokens of ``[b, h, s, d]``; with
    ``wrap`` the last group is cut at its middle (its halves are the sequence's two ends)."""
    b, h, s, d = q.shape
    n = s // group
    shape = (b, h, n, group, -1)
    qg, kg, vg = q.reshape(shape), k.reshape(shape), v.reshape(shape)
    mask = torch.ones(n, group, group, dtype=torch.bool, device=q.device).tril()
    if wrap:
        half = torch.arange(group, device=q.device) < group // 2
        mask[-1] &= half[:, None] == half[None, :]
    out = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=mask, scale=scale)
    return out.reshape(b, h, s, -1)


def shifted_sparse_attention(
    q: Tensor, k: Tensor, v: Tensor, group: int, scale: float | None = None
) -> Tensor:
    """S²-Attn over ``[b, h, s, d]`` queries, keys and values (``h`` even; ``s`` a multiple of
    ``group``; the second half of the heads shifted).

    Returns:
        ``[b, h, s, d_v]``.

    Raises:
        ValueError: An odd number of heads, or a length that is not a multiple of the group.
    """
    b, h, s, _ = q.shape
    if h % 2:
        raise ValueError(f"S²-Attn shifts half the heads; {h} heads cannot be halved")
    if group < 2 or s % group:
        raise ValueError(f"S²-Attn needs a length that is a multiple of the group: {s} and {group}")
    if s == group:  # one group: nothing to shift
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    half = h // 2
    plain = _grouped(q[:, :half], k[:, :half], v[:, :half], group, False, scale)
    shift = group // 2
    rolled = [x[:, half:].roll(-shift, dims=2) for x in (q, k, v)]
    moved = _grouped(*rolled, group, True, scale).roll(shift, dims=2)
    return torch.cat((plain, moved), dim=1)
