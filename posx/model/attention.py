"""Causal attention whose kernel is chosen from what the encoding declares.

- no bias, no ``attend``: ``scaled_dot_product_attention(is_causal=True)`` (flash on GPU);
- a bias: ``blocked`` over queries, each block building only its own ``[h, block, sk]`` bias
  (any device; the block shrinks at long lengths so one block's scores stay under a fixed
  element budget, ``posx.encodings.blocked.MAX_BLOCK_ELEMENTS``, which keeps memory linear in
  the sequence length), or ``flex``: FlexAttention with a ``score_mod`` that reads the bias
  from a per-distance table (``encoding.relative_bias``), compiled into a fused kernel, so no
  ``[s, s]`` tensor exists;
- ``attend``: the encoding's own computation.

The model carries the choice (``TransformerLM(attention_kernel=...)``, see :data:`KERNELS`):
``auto`` takes ``flex`` on CUDA and ``blocked`` elsewhere; ``blocked`` never uses FlexAttention
(the fallback should a bias not compile); ``flex`` uses it on any device where PyTorch can run
it (on the CPU: forward only, since PyTorch has no FlexAttention backward there). A bias that
FlexAttention cannot take gets the blocked kernel; :func:`flex_unsupported_reason` says why.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Hashable

import torch
import torch.nn.functional as F
from torch import Tensor

from posx.encodings.base import PositionalEncoding
from posx.encodings.blocked import (
    consecutive_positions,
    distance_block,
    future_bias,
    query_block,
)
from posx.encodings.memo import PositionMemo
from posx.model.flex import (
    FLEX_AVAILABLE,
    bias_per_distance,
    flex_bias_attention,
    flex_unsupported_reason,
    remember_flex_failure,
)

BiasFn = Callable[[Tensor, Tensor], Tensor]

#: Values of ``attention_kernel``: which kernel a bias encoding gets (others are fixed).
KERNELS = ("auto", "blocked", "flex")


def choose_kernel(
    encoding: PositionalEncoding,
    device: torch.device,
    kernel: str = "auto",
    needs_grad: bool = False,
    float_positions: bool = False,
    flex_available: bool = FLEX_AVAILABLE,
) -> str:
    """The attention kernel for ``encoding`` on ``device``.

    Args:
        encoding: The layer's encoding.
        device: Where the attention runs.
        kernel: The model's ``attention_kernel`` (one of :data:`KERNELS`).
        needs_grad: A gradient must flow through the attention (FlexAttention has a backward
            on CUDA only).
        float_positions: Positions are fractional (no integer distance to index a table by).
        flex_available: Whether this torch has FlexAttention.

    Returns:
        ``"attend"`` (the encoding's own), ``"sdpa"`` (fused causal, no bias), ``"flex"``
        (FlexAttention ``score_mod``) or ``"blocked"`` (query-blocked SDPA with a bias).
    """
    if kernel not in KERNELS:
        raise ValueError(f"attention kernel must be one of {', '.join(KERNELS)}; got {kernel!r}")
    if encoding.has_attend:
        return "attend"
    if not encoding.has_bias:
        return "sdpa"
    if kernel == "blocked" or float_positions:
        return "blocked"
    if (needs_grad and device.type != "cuda") or flex_unsupported_reason(encoding, flex_available):
        return "blocked"
    if kernel == "flex" or device.type == "cuda":
        return "flex"
    return "blocked"


def causal_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_pos: Tensor,
    k_pos: Tensor,
    encoding: PositionalEncoding,
    block_size: int = 256,
    kernel: str = "auto",
) -> Tensor:
    """Causal multi-head attention with the encoding's hooks applied.

    Args:
        q: Queries ``[b, h, s, d_h]``.
        k: Keys ``[b, h, s, d_h]``.
        v: Values ``[b, h, s, d_h]``.
        q_pos: Query positions ``[s]`` or ``[b, s]``.
        k_pos: Key positions ``[s]`` or ``[b, s]``.
        encoding: The layer's positional encoding.
        block_size: Most queries per block on the blocked bias path.
        kernel: Which kernel a bias takes (one of :data:`KERNELS`; see :func:`choose_kernel`).

    Returns:
        ``[b, h, s, d_h]``.
    """
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    floats = q_pos.is_floating_point() or k_pos.is_floating_point()
    chosen = choose_kernel(encoding, q.device, kernel, needs_grad, floats)
    if chosen == "attend":
        return encoding.attend(q, k, v, q_pos, k_pos)
    q, k = encoding.rotate(q, k, q_pos, k_pos)
    if chosen == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if chosen == "flex":
        try:
            return flex_bias_attention(q, k, v, q_pos, k_pos, encoding.bias)
        except torch.OutOfMemoryError:
            raise
        except Exception as err:  # noqa: BLE001 - a bias the compiler rejects: fall back once
            remember_flex_failure(encoding, err)
            warnings.warn(
                f"FlexAttention failed for {type(encoding).__name__} ({type(err).__name__}); "
                "using blocked attention for it",
                stacklevel=2,
            )
    return blocked_bias_attention(
        q,
        k,
        v,
        q_pos,
        k_pos,
        encoding.bias,
        block_size,
        _bias_memo(encoding),
        relative=encoding.relative_bias,
    )


# encoding -> its masked bias blocks, reused across layers (shared encodings) and steps
_BIAS_MEMO: weakref.WeakKeyDictionary[PositionalEncoding, PositionMemo] = (
    weakref.WeakKeyDictionary()
)


# Elements of bias blocks one encoding keeps (32 MiB of float32). A forward asks for every block
# in every layer, so what fits is computed once per forward (once per evaluation length when no
# gradient flows): all of them up to h * (s^2/2 + s * block/2) elements, e.g. the small model's
# 8 heads at 1,024 tokens (5.2M); beyond, the memo keeps the part of the cycle that fits.
BIAS_MEMO_ELEMENTS = 2**23


def _bias_memo(encoding: PositionalEncoding) -> tuple[PositionMemo, tuple[int, ...]]:
    if encoding not in _BIAS_MEMO:
        _BIAS_MEMO[encoding] = PositionMemo(BIAS_MEMO_ELEMENTS)
    return _BIAS_MEMO[encoding], encoding.cache_key()


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
    largest temporary is bounded and memory grows linearly with ``s``.

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
            (:func:`~posx.encodings.blocked.distance_block`): ``2s - 1`` evaluations per
            call instead of one per pair of every block.

    Returns:
        ``[b, h, s, d_h]``.
    """
    if block_size <= 0:
        raise ValueError(f"attention block_size must be positive, got {block_size}")
    b, h, s, _ = q.shape
    step = query_block(block_size, b, h, s)
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
            outputs.append(F.scaled_dot_product_attention(qb, kb, vb, bias))
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
