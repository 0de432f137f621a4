"""Causal attention with an additive bias, one block of queries at a time (any device).

Each block builds only its own ``[h, block, keys]`` bias, so the ``s x s`` matrix never exists
and memory grows linearly with the sequence length. :mod:`posx.model.attention` chooses this
kernel for an encoding with a ``bias`` hook; the encoding reaches it only as a function.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import torch
import torch.nn.functional as F
from torch import Tensor

from posx.kernels.blocked import future_bias
from posx.kernels.budget import block_budget, query_block
from posx.kernels.flex.attention import bias_per_distance
from posx.kernels.memo import PositionMemo
from posx.kernels.relative import consecutive_positions, distance_block
from posx.kernels.sdpa_mask import sdpa_mask

BiasFn = Callable[[Tensor, Tensor], Tensor]


def blocked_bias_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_pos: Tensor,
    k_pos: Tensor,
    bias_fn: BiasFn,
    block_size: int = 256,
    memo: tuple[PositionMemo, Hashable] | None = None,
    relative: bool = False,
) -> Tensor:
    """Causal attention with an additive bias computed one query block at a time.

    Query block ``[i0, i1)`` only sees keys ``[0, i1)``, so each SDPA call gets a
    ``[(b,) h, i1 - i0, i1]`` bias and the full ``s x s`` matrix never exists. The block holds
    at most ``block_size`` queries and fewer at long lengths (see :func:`query_block`), so the
    largest temporary is bounded and memory grows linearly with ``s``. On CUDA the device's
    budget alone sizes the blocks (:func:`~posx.kernels.budget.block_budget`).

    Args:
        q: Queries ``[b, h, s, d_h]``.
        k: Keys ``[b, h, s, d_h]``.
        v: Values ``[b, h, s, d_h]``.
        q_pos: Query positions ``[s]`` or ``[b, s]``.
        k_pos: Key positions ``[s]`` or ``[b, s]``.
        bias_fn: ``(q_pos_block, k_pos_prefix) -> [(b,) h, block, prefix]``.
        block_size: Most queries per block (``>= s`` gives one unblocked call at short ``s``).
        memo: A cache and the bias's key (e.g. its parameters' versions): masked bias blocks
            are then reused while positions and key are unchanged, within its size budget.
        relative: The bias is a function of ``q_pos - k_pos`` alone. With consecutive
            positions, blocks are then read from a table of it per distance
            (:func:`~posx.kernels.relative.distance_block`): ``2s - 1`` evaluations per
            call instead of one per pair of every block.

    Returns:
        ``[b, h, s, d_h]``.
    """
    if block_size <= 0:
        raise ValueError(f"attention block_size must be positive, got {block_size}")
    b, h, s, _ = q.shape
    budget = block_budget(q.device)
    step = query_block(budget.queries(block_size), b, h, s, budget.bias)
    by_distance = relative and consecutive_positions(q_pos, k_pos)
    table: Tensor | None = None  # made at the first block the memo does not hold
    outputs = []
    # Last block first: its temporaries are the largest, so every later (smaller) block fits in
    # memory the allocator already holds. Growing blocks would each need a fresh, larger chunk,
    # and on CPU the heap keeps the smaller freed ones: RSS several times the live tensors.
    for i0 in reversed(range(0, s, step)):
        i1 = min(s, i0 + step)
        qp, kp = q_pos[..., i0:i1], k_pos[..., :i1]

        def masked_bias(qp: Tensor = qp, kp: Tensor = kp, i0: int = i0, i1: int = i1) -> Tensor:
            nonlocal table
            if by_distance:  # read from the table, masked and contiguous
                if table is None:
                    table = _causal_distance_table(bias_fn, s, q.device, q.dtype)
                return distance_block(table, i0, i1).unsqueeze(0)
            # Adding a [block, keys] -inf mask is one vectorised pass (masked_fill with a
            # broadcast boolean mask is several times slower on the CPU). Contiguous: biases
            # come head-last ([.., sq, sk, h] moved), and SDPA reads a strided mask 10-20%
            # slower in every call that reuses the block.
            bias = bias_fn(qp, kp).to(q.dtype) + future_bias(i0, i1, q.device).to(q.dtype)
            bias = bias.contiguous()
            # SDPA's fused CPU kernel takes a 4-D mask only; a 3-D one runs the unfused math.
            return bias.unsqueeze(0) if bias.dim() == 3 else bias

        if memo is None:
            bias = masked_bias()
        else:
            bias = memo[0].get((memo[1], i0, i1, q.dtype), (qp, kp), masked_bias)
        qb, kb, vb = q[..., i0:i1, :], k[..., :i1, :], v[..., :i1, :]
        if bias.requires_grad and q.device.type == "cpu":
            outputs.append(_attention_with_learned_bias(qb, kb, vb, bias))
        else:
            outputs.append(F.scaled_dot_product_attention(qb, kb, vb, sdpa_mask(bias)))
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs[::-1], dim=-2)


def _causal_distance_table(
    bias_fn: BiasFn, s: int, device: torch.device, dtype: torch.dtype
) -> Tensor:
    """``[h, 2s - 1]``: the bias at distances ``s - 1`` down to 0, then ``-inf`` down to
    ``1 - s``. At consecutive positions a negative distance is a future key, so the table's
    blocks come masked; the bias itself is never evaluated there (log-distance biases are not
    defined for negative distances)."""
    bias = bias_per_distance(bias_fn, torch.arange(s - 1, -1, -1, device=device)).to(dtype)
    return torch.cat((bias, bias.new_full((bias.shape[0], s - 1), float("-inf"))), dim=-1)


def _attention_with_learned_bias(q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
    """``softmax(q k^T / sqrt(d_h) + bias) v`` for a bias that needs a gradient, on CPU.

    SDPA's fused CPU kernel has no gradient for its mask, so SDPA falls back to its generic
    math path, which also guards against fully masked rows (there are none here: every query
    sees itself). Written out, the same computation is ~20% faster.
    """
    scores = torch.add(bias, q @ k.transpose(-1, -2), alpha=q.shape[-1] ** -0.5)
    return torch.softmax(scores.float(), dim=-1).to(v.dtype) @ v
