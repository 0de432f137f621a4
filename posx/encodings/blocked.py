"""Query-blocked causal attention for encodings that compute their own scores (``attend``).

Query block ``[i0, i1)`` only sees keys ``[0, i1)``, so one block's logits are
``[b, h, i1 - i0, i1]`` and the full ``s x s`` matrix never exists (memory O(block x s)).
The encoding supplies the block's logits and, optionally, an extra value term computed from the
block's attention probabilities (Shaw et al.'s ``a^V``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

# (i0, i1) -> (logits [b, h, i1 - i0, i1] before masking, context handed to the value term)
ScoresFn = Callable[[int, int], tuple[Tensor, Any]]
# (probs [b, h, i1 - i0, i1], context) -> extra output [b, h, i1 - i0, d_h]
ValueFn = Callable[[Tensor, Any], Tensor]


def future_mask(i0: int, i1: int, device: torch.device) -> Tensor:
    """Bool ``[i1 - i0, i1]``: True where key ``j`` comes after query ``i`` (by index)."""
    rows = torch.arange(i0, i1, device=device).unsqueeze(-1)
    return torch.arange(i1, device=device) > rows


def blocked_attend(
    v: Tensor,
    scores_fn: ScoresFn,
    block_size: int,
    value_fn: ValueFn | None = None,
) -> Tensor:
    """Causal softmax attention, one query block at a time.

    Args:
        v: Values ``[b, h, s, d_h]``.
        scores_fn: The block's scaled logits ``[b, h, i1 - i0, i1]`` (unmasked) and a context.
        block_size: Queries per block (``>= s`` gives one unblocked pass).
        value_fn: Optional extra output term from the block's probabilities.

    Returns:
        ``[b, h, s, d_h]`` in ``v``'s dtype.
    """
    if block_size <= 0:
        raise ValueError(f"attention block_size must be positive, got {block_size}")
    s = v.shape[-2]
    outputs = []
    for i0 in range(0, s, block_size):
        i1 = min(s, i0 + block_size)
        logits, ctx = scores_fn(i0, i1)
        logits = logits.float().masked_fill(future_mask(i0, i1, v.device), float("-inf"))
        probs = torch.softmax(logits, dim=-1)  # float32 softmax: stable under bf16 autocast
        out = probs.to(v.dtype) @ v[..., :i1, :]
        if value_fn is not None:
            out = out + value_fn(probs, ctx).to(v.dtype)
        outputs.append(out)
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-2)


def per_query(index: Tensor, like: Tensor) -> Tensor:
    """Broadcasts a ``[sq, sk]`` or ``[b, sq, sk]`` index to ``like``'s ``[b, h, sq, sk]``."""
    if index.dim() == 3:
        index = index.unsqueeze(1)
    return index.expand(like.shape[0], like.shape[1], *index.shape[-2:])


def gather_relative(table: Tensor, index: Tensor) -> Tensor:
    """Picks, for every (query, key) pair, the query's score for that pair's relative slot.

    Args:
        table: Per-query scores for every slot ``[b, h, sq, r]``.
        index: Slot of each pair ``[sq, sk]`` or ``[b, sq, sk]`` (long, in ``[0, r)``).

    Returns:
        ``[b, h, sq, sk]`` with ``out[.., i, j] = table[.., i, index[i, j]]``.
    """
    return torch.gather(table, -1, per_query(index, table))


def integer_distance(distance: Tensor) -> Tensor:
    """Rounds float distances (interpolated positions) to the nearest integer slot."""
    return distance.round().long() if distance.is_floating_point() else distance.long()
