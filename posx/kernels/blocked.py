"""Query-blocked causal attention for encodings that compute their own scores (``attend``).

Query block ``[i0, i1)`` only sees keys ``[0, i1)``, so one block's logits are at most
``[b, h, i1 - i0, i1]`` and the full ``s x s`` matrix never exists. The block shrinks at long
lengths so that one block's logits stay under a budget of elements (:mod:`posx.kernels.budget`:
the budgets per device, and the queries they allow): memory grows linearly with the length. The
encoding supplies the block's logits and, optionally, an extra value term computed from the
block's attention probabilities (Shaw et al.'s ``a^V``).

Far keys. Relative encodings with a clipping distance (Shaw, DeBERTa) give every pair further
apart than it the same relative term: its logit is the content score of (possibly shifted)
queries and keys plus a per-query constant, and its value is ``v`` plus a constant vector. An
encoding says so with :class:`FarKeys`; keys that are that far from every query of a block then
go through a fused attention kernel that also returns the log-sum-exp, and only the near band
(about ``block + distance`` keys per block) is computed explicitly. The two parts are merged
exactly by their log-sum-exps. This needs a kernel returning the log-sum-exp (on the CPU,
``_scaled_dot_product_flash_attention_for_cpu``) and no gradient (that kernel's log-sum-exp has
none), so training and other devices take the explicit path, with the same result; there the
far keys' description is never built.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posx.kernels.budget import block_budget, query_block
from posx.kernels.flash import flash_available, flash_lse, merge_by_lse
from posx.kernels.sdpa_mask import sdpa_mask

# (i0, i1, j0) -> (logits [b, h, i1 - i0, i1 - j0] of queries [i0, i1) and keys [j0, i1),
# before masking, in a tensor of its own: the kernel masks it in place; a context handed to
# the value term)
ScoresFn = Callable[[int, int, int], tuple[Tensor, Any]]
# (probs [b, h, i1 - i0, i1 - j0], context) -> extra output [b, h, i1 - i0, d_h]
ValueFn = Callable[[Tensor, Any], Tensor]


@dataclass(frozen=True)
class FarKeys:
    """How an encoding scores pairs at least ``distance`` apart (``q_pos - k_pos >= distance``).

    For such a pair the logit is ``scale * q_i . k_j + logit_offset_i`` and the value
    ``v_j + value_offset``.

    Attributes:
        distance: Position distance from which the encoding's relative terms are constant.
        q: Queries for the content score ``[b, h, s, d_h]`` (may hold a folded key-side term).
        k: Keys ``[b, h, s, d_h]``.
        scale: Logit scale.
        q_pos: Query positions ``[s]`` or ``[b, s]``.
        k_pos: Key positions ``[s]`` or ``[b, s]``.
        logit_offset: Per-query constant ``[b, h, s]`` (``None``: 0).
        value_offset: Added to far values, ``[d_h]`` or ``[h, 1, d_h]`` (``None``: 0).
    """

    distance: float
    q: Tensor
    k: Tensor
    scale: float
    q_pos: Tensor
    k_pos: Tensor
    logit_offset: Tensor | None = None
    value_offset: Tensor | None = None


def future_mask(i0: int, i1: int, device: torch.device, j0: int = 0) -> Tensor:
    """Bool ``[i1 - i0, i1 - j0]``: True where key ``j`` (from ``j0``) comes after query ``i``."""
    rows = torch.arange(i0, i1, device=device).unsqueeze(-1)
    return torch.arange(j0, i1, device=device) > rows


def future_bias(i0: int, i1: int, device: torch.device, j0: int = 0) -> Tensor:
    """Float ``[i1 - i0, i1 - j0]``: ``-inf`` where key ``j`` comes after query ``i``, else 0.

    Added to a block's logits it masks them in one vectorised pass; ``masked_fill`` with a
    broadcast boolean mask is several times slower on the CPU.
    """
    zeros = torch.zeros(i1 - i0, i1 - j0, device=device)
    return zeros.masked_fill_(future_mask(i0, i1, device, j0), float("-inf"))


def mask_future_(logits: Tensor, i0: int, i1: int, j0: int = 0) -> Tensor:
    """Sets ``logits [.., i1 - i0, i1 - j0]`` (queries ``[i0, i1)``, keys ``[j0, i1)``) to
    ``-inf`` where the key comes after the query, in place; returns ``logits``.

    Keys before ``i0`` precede every query of the block, so only the block's last ``i1 - i0``
    columns (its diagonal square) are touched: one pass over ``(i1 - i0)^2`` elements rather
    than over the whole block.
    """
    diagonal = logits[..., i0 - j0 :]
    diagonal += future_bias(i0, i1, logits.device, i0).to(logits.dtype)
    return logits


def blocked_attend(
    v: Tensor,
    scores_fn: ScoresFn,
    block_size: int,
    value_fn: ValueFn | None = None,
    far: Callable[[], FarKeys] | None = None,
) -> Tensor:
    """Causal softmax attention, one query block at a time.

    Args:
        v: Values ``[b, h, s, d_h]``.
        scores_fn: The block's scaled logits for keys ``[j0, i1)`` (unmasked) and a context.
        block_size: Most queries per block (``>= s`` gives one unblocked pass at short ``s``);
            fewer at long lengths (:func:`query_block` with the device's ``attend`` budget,
            :func:`block_budget`; on CUDA the budget alone decides).
        value_fn: Optional extra output term from the block's probabilities.
        far: Makes the description of far keys, to send them through a fused kernel (module
            docstring); called only where that kernel is used. ``None``: every key is scored
            by ``scores_fn``.

    Returns:
        ``[b, h, s, d_h]`` in ``v``'s dtype.
    """
    if block_size <= 0:
        raise ValueError(f"attention block_size must be positive, got {block_size}")
    b, h, s, _ = v.shape
    v = v.contiguous()  # once, rather than a copy of its prefix in every block's matmul
    budget = block_budget(v.device)
    block_size = budget.queries(block_size)
    step = query_block(block_size, b, h, s, budget.attend)
    far_keys = far() if far is not None and fused_lse_available(v.device) else None
    if far_keys is not None:
        step = _far_step(far_keys, block_size, (b, h, s), step, budget.attend)
    starts = list(range(0, s, step))
    far_from = [0] * len(starts) if far_keys is None else _far_starts(far_keys, starts, step, s)
    outputs = []
    # Last block first: its temporaries are the largest (most keys), so each later block fits
    # in memory the allocator already holds; growing blocks would each take fresh, larger
    # chunks while the C heap keeps the freed smaller ones (RSS several times the live tensors).
    for i0, j0 in reversed(list(zip(starts, far_from, strict=True))):
        i1 = min(s, i0 + step)
        logits, ctx = scores_fn(i0, i1, j0)
        logits = mask_future_(logits.float(), i0, i1, j0)
        if j0 == 0:
            probs = torch.softmax(logits, dim=-1)  # float32 softmax: stable under bf16 autocast
            out = probs.to(v.dtype) @ v[..., :i1, :]
            if value_fn is not None:
                out = out + value_fn(probs, ctx).to(v.dtype)
            outputs.append(out)
            continue
        # The block's own softmax, in place, with its log-sum-exp: one exp pass over the
        # block (logsumexp and a second exp of logits - lse made two, and two new tensors).
        peak = logits.amax(dim=-1, keepdim=True)
        probs = logits.sub_(peak).exp_()
        total = probs.sum(dim=-1, keepdim=True)
        probs.div_(total)
        near_lse = (peak + total.log()).squeeze(-1)  # [b, h, bq]
        near = probs @ v[..., j0:i1, :].float()
        if value_fn is not None:
            near = near + value_fn(probs, ctx).float()
        far_part = _far_part(far_keys, v, i0, i1, j0)
        outputs.append(merge_by_lse(near, near_lse, *far_part).to(v.dtype))
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs[::-1], dim=-2)


# (i0, i1) -> the additive bias [b, h, i1 - i0, i1] of queries [i0, i1) and keys [0, i1), already
# scaled, before masking, in a tensor (or a non-overlapping view) of its own: masked in place
BiasFn = Callable[[int, int], Tensor]


def blocked_bias_sdpa(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    bias_fn: BiasFn,
    block_size: int,
    scale: float,
    step: int | None = None,
) -> Tensor:
    """Causal attention whose logits are ``scale * q . k`` plus a per-pair bias, one query block
    at a time, each through SDPA's fused kernel with the block's bias as its float mask.

    For encodings whose extra terms are all additive scores (no value term): the fused kernel
    takes the content product, the softmax and the value product in one pass, with no
    probabilities tensor, 2x faster per block than :func:`blocked_attend` at 1,024 tokens on
    the CPU. Without a gradient only: the CPU kernel has no gradient for the mask.

    Args:
        q: Queries ``[b, h, s, d_h]``.
        k: Keys ``[b, h, s, d_h]``.
        v: Values ``[b, h, s, d_h]``.
        bias_fn: The block's bias (see :data:`BiasFn`).
        block_size: Most queries per block; fewer at long lengths (:func:`query_block` with
            the device's ``attend`` budget, :func:`block_budget`).
        scale: Factor of ``q . k`` (the bias is not scaled).
        step: Queries per block, overriding the default (the ``attend`` budget): e.g.
            :func:`sdpa_query_block`.

    Returns:
        ``[b, h, s, d_h]``.
    """
    b, h, s, _ = v.shape
    if step is None:  # the budget of the explicit path: the bias and its product are as large
        budget = block_budget(q.device)
        step = query_block(budget.queries(block_size), b, h, s, budget.attend)
    outputs = []
    for i0 in reversed(range(0, s, step)):  # largest block first (see blocked_attend)
        i1 = min(s, i0 + step)
        mask = mask_future_(bias_fn(i0, i1).to(q.dtype), i0, i1)
        mask = sdpa_mask(mask)  # a strided view stops CUDA's kernel (see sdpa_mask)
        outputs.append(
            torch.nn.functional.scaled_dot_product_attention(
                q[..., i0:i1, :], k[..., :i1, :], v[..., :i1, :], attn_mask=mask, scale=scale
            )
        )
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs[::-1], dim=-2)


def sdpa_query_block(
    block_size: int, batch: int, heads: int, keys: int, device: torch.device | None = None
) -> int:
    """Queries per block of :func:`blocked_bias_sdpa` when the bias is a fresh product per block.

    The bias is written once and read once by the fused kernel: blocks of
    :data:`SDPA_BLOCK_ELEMENTS` keep it in cache between the two. At least 32 queries (while the
    bias stays under :data:`MAX_BLOCK_ELEMENTS`): every fused call has a fixed cost (8k tokens,
    one layer of the tiny model: 554 ms in blocks of 8, 412 ms in blocks of 32). At most half
    the keys: a single block would compute its whole masked upper triangle, two skip a quarter.
    Measured, Transformer-XL at 1,024 tokens, one thread, one layer: tiny 16.2 ms in blocks of
    128 (the explicit budget) against 15.3 ms in 64; at 256 tokens, 6.4 against 5.0.

    ``device`` (default the CPU) picks the budgets (:func:`block_budget`): on CUDA the
    device's, without the ``block_size`` cap.
    """
    budget = block_budget(torch.device("cpu") if device is None else device)
    block_size = budget.queries(block_size)
    step = query_block(block_size, batch, heads, keys, budget.sdpa)
    floor = query_block(32, batch, heads, keys + 32, budget.bias)
    return max(1, min(block_size, max(step, floor), -(-keys // 2)))


def fused_lse_available(device: torch.device) -> bool:
    """Whether far keys can take the fused kernel: on the CPU, with no gradient to compute."""
    return not torch.is_grad_enabled() and flash_available(device)


def _far_starts(far: FarKeys, starts: list[int], step: int, s: int) -> list[int]:
    """For each query block, how many leading keys are far from all of its queries.

    Keys ``[0, j)`` qualify when each is at least ``far.distance`` before the block's smallest
    query position (in every row) and before the block by index (so causally visible). Works
    for any positions; with increasing ones it is about ``i0 - distance``. One host sync.
    """
    q_pos, k_pos = far.q_pos, far.k_pos
    if q_pos.dim() == 2:  # per-row positions: the block's smallest query over all rows
        q_pos, k_pos = q_pos.amin(0), k_pos.amax(0)
    pad = len(starts) * step - s  # the last block may be shorter
    padded = torch.cat((q_pos, q_pos.new_full((pad,), q_pos.max().item()))) if pad else q_pos
    block_min = padded.view(len(starts), step).amin(-1)
    # keys [0, j) all lie at or below reach[j - 1]; float64 compares integer positions exactly
    reach = torch.cummax(k_pos.double(), dim=0).values
    count = torch.searchsorted(reach, block_min.double() - far.distance, right=True)
    return [min(int(c), i0) for c, i0 in zip(count.tolist(), starts, strict=True)]


def _far_step(
    far: FarKeys, block_size: int, shape: tuple[int, int, int], step: int, budget: int
) -> int:
    """Queries per block where far keys bound every block's explicit band.

    The budget sizes blocks for ``s`` keys, but with far keys a block only builds logits for
    its near band (about ``block + distance`` keys): at 32k tokens that meant 8-query blocks,
    4,096 per layer, each with its own fused call and allocations. The wider step is kept only
    if every band it makes (measured with these positions) fits the same budget; else ``step``.
    """
    b, h, s = shape
    band = min(s, block_size + max(0, math.ceil(far.distance)))
    wide = query_block(block_size, b, h, band, budget)
    if wide <= step:
        return step
    starts = list(range(0, s, wide))
    far_from = _far_starts(far, starts, wide, s)
    widest = max(min(s, i0 + wide) - j0 for i0, j0 in zip(starts, far_from, strict=True))
    # positions without a narrow band (gaps, shuffles) keep the small blocks
    return wide if b * h * wide * widest <= budget else step


def _far_part(far: FarKeys, v: Tensor, i0: int, i1: int, j0: int) -> tuple[Tensor, Tensor]:
    """Output ``[b, h, bq, d_h]`` (float32) and log-sum-exp of queries ``[i0, i1)`` over the
    far keys ``[0, j0)``."""
    out, lse = flash_lse(far.q[..., i0:i1, :], far.k[..., :j0, :], v[..., :j0, :], far.scale)
    out = out.float()
    if far.value_offset is not None:
        out = out + far.value_offset.float()
    if far.logit_offset is not None:
        lse = lse + far.logit_offset[..., i0:i1].float()
    return out, lse
