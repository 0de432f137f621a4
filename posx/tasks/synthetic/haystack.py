"""Building blocks of the RULER-shaped tasks: needles in filler, and shuffled multisets.

RULER (Hsieh et al. 2024) hides needle sentences at random depths of a haystack and builds
its aggregation tasks from lists in which items repeat a set number of times. At the token
level a haystack is a repeating pattern of filler symbols (RULER's "noise" haystack, "The
grass is green. The sky is blue. ..." repeated) and a needle is a short run of tokens;
:func:`place_needles` puts needles into filler and :func:`shuffled_multiset` lays out a list
with given counts in random order, both vectorised over a batch whose rows differ in size.
"""

from __future__ import annotations

import torch
from torch import Tensor


def sorted_depths(filler: Tensor, count: int, generator: torch.Generator) -> Tensor:
    """``[b, count]`` insertion depths, uniform in ``[0, filler[i]]`` and sorted per row.

    Depth ``d`` puts a needle after ``d`` filler tokens; equal depths put needles side by side.
    """
    u = torch.rand(len(filler), count, generator=generator)
    return (u * (filler.unsqueeze(1) + 1)).long().clamp(max=filler.unsqueeze(1)).sort(1).values


def place_needles(
    needles: Tensor, depth: Tensor, filler: Tensor, first_filler: int, period: int
) -> tuple[Tensor, Tensor]:
    """Inserts needles into a repeating filler pattern.

    Args:
        needles: ``[b, N, w]`` token ids, needle ``i`` of a row placed ``i``-th.
        depth: ``[b, N]`` sorted depths (filler tokens before each needle).
        filler: ``[b]`` filler tokens per row.
        first_filler: Id of the first filler symbol; the pattern is
            ``first_filler .. first_filler + period - 1`` repeated, counted over the filler only
            (a needle interrupts the pattern, it does not shift it).
        period: Length of the filler pattern.

    Returns:
        ``(tokens [b, max(filler) + N * w], lengths [b])``; row ``i`` uses its first
        ``filler[i] + N * w`` tokens (the rest is filler).
    """
    b, n, w = needles.shape
    width = int(filler.max()) + n * w
    start = depth + torch.arange(n) * w  # [b, N]: earlier needles shift later ones by w each
    where = (start.unsqueeze(2) + torch.arange(w)).reshape(b, n * w)
    is_needle = torch.zeros(b, width, dtype=torch.bool).scatter_(1, where, True)
    filler_index = (~is_needle).long().cumsum(1) - 1
    tokens = first_filler + filler_index.clamp(min=0) % period
    tokens.scatter_(1, where, needles.reshape(b, n * w).long())
    return tokens, filler + n * w


def shuffled_multiset(counts: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """A random order of a multiset: slot ``r`` of row ``i`` repeated ``counts[i, r]`` times.

    Args:
        counts: ``[b, R]`` non-negative repeat counts.
        generator: Draws the order (every arrangement equally likely).

    Returns:
        ``(slots [b, W], lengths [b])``: slot indices in ``[0, R)``, row ``i`` using its first
        ``lengths[i] = counts[i].sum()`` entries (the rest repeat the last slot).
    """
    lengths = counts.sum(1)
    width = int(lengths.max())
    ends = counts.cumsum(1)  # [b, R]: slot r fills positions [ends[r-1], ends[r])
    slots = torch.searchsorted(ends, torch.arange(width).repeat(len(counts), 1), right=True)
    slots = slots.clamp(max=counts.shape[1] - 1)
    key = torch.rand(len(counts), width, generator=generator)
    key = key.masked_fill(torch.arange(width) >= lengths.unsqueeze(1), 2.0)  # padding last
    return slots.gather(1, key.argsort(1)), lengths
