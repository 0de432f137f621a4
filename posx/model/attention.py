"""Causal attention whose kernel is chosen from what the encoding declares.

- no bias, no ``attend``: ``scaled_dot_product_attention(is_causal=True)`` (flash on GPU);
- a bias: blocked over queries, each block building only its own ``[h, block, sk]`` bias, so
  memory grows as O(block x s) rather than O(s^2);
- ``attend``: the encoding's own computation.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from posx.encodings.base import PositionalEncoding

BiasFn = Callable[[Tensor, Tensor], Tensor]


def causal_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_pos: Tensor,
    k_pos: Tensor,
    encoding: PositionalEncoding,
    block_size: int = 256,
) -> Tensor:
    """Causal multi-head attention with the encoding's hooks applied.

    Args:
        q: Queries ``[b, h, s, d_h]``.
        k: Keys ``[b, h, s, d_h]``.
        v: Values ``[b, h, s, d_h]``.
        q_pos: Query positions ``[s]`` or ``[b, s]``.
        k_pos: Key positions ``[s]`` or ``[b, s]``.
        encoding: The layer's positional encoding.
        block_size: Queries per block on the biased path.

    Returns:
        ``[b, h, s, d_h]``.
    """
    if encoding.has_attend:
        return encoding.attend(q, k, v, q_pos, k_pos)
    q, k = encoding.rotate(q, k, q_pos, k_pos)
    if not encoding.has_bias:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return blocked_bias_attention(q, k, v, q_pos, k_pos, encoding.bias, block_size)


def causal_block_mask(i0: int, i1: int, device: torch.device) -> Tensor:
    """True where key ``j`` comes after query ``i`` (rows ``i0..i1``, keys ``0..i1``)."""
    rows = torch.arange(i0, i1, device=device).unsqueeze(-1)
    cols = torch.arange(i1, device=device)
    return cols > rows


def blocked_bias_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_pos: Tensor,
    k_pos: Tensor,
    bias_fn: BiasFn,
    block_size: int = 256,
) -> Tensor:
    """Causal attention with an additive bias computed one query block at a time.

    Query block ``[i0, i1)`` only sees keys ``[0, i1)``, so each SDPA call gets a
    ``[(b,) h, i1 - i0, i1]`` bias and the full ``s x s`` matrix never exists.

    Args:
        q: Queries ``[b, h, s, d_h]``.
        k: Keys ``[b, h, s, d_h]``.
        v: Values ``[b, h, s, d_h]``.
        q_pos: Query positions ``[s]`` or ``[b, s]``.
        k_pos: Key positions ``[s]`` or ``[b, s]``.
        bias_fn: ``(q_pos_block, k_pos_prefix) -> [(b,) h, block, prefix]``.
        block_size: Queries per block (``>= s`` gives a single unblocked call).

    Returns:
        ``[b, h, s, d_h]``.
    """
    if block_size <= 0:
        raise ValueError(f"attention block_size must be positive, got {block_size}")
    s = q.shape[-2]
    outputs = []
    for i0 in range(0, s, block_size):
        i1 = min(s, i0 + block_size)
        bias = bias_fn(q_pos[..., i0:i1], k_pos[..., :i1]).to(q.dtype)
        bias = bias.masked_fill(causal_block_mask(i0, i1, q.device), float("-inf"))
        outputs.append(
            F.scaled_dot_product_attention(q[..., i0:i1, :], k[..., :i1, :], v[..., :i1, :], bias)
        )
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-2)
