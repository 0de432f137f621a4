"""CoPE's attention (Golovneva et al. 2024): contextual positions counted by gates, their
interpolated position logits, the softmax and the value product, one query block at a time.

For query ``i`` and key ``j <= i`` the logit is ``z_ij = c_ij + interp(L_i, p_ij)`` with the
content score ``c_ij = scale q_i.k_j``, the gates ``g_it = sigmoid(c_it)``, the position
``p_ij = min(sum_{t=j..i} g_it, npos_max - 1)`` (with position gaps: each gate after the key
weighted by its gap) and ``L_i = q_i E`` the query's logit at every integer position, read
linearly between the two around ``p_ij``.

Keys are laid out last to first once per layer (:mod:`posx.kernels.cope.layer`, with the
position tables), so the positions are plain cumulative sums.

Four routes, with the same logits:

- explicit (:class:`CoPEAttention`), with gradients, off the CPU or with values of another
  head size than the queries (which the flash kernel does not take): per block the logits,
  softmax and value product; the layer is one autograd node whose backward is written out.
  Its forward takes the fused C kernel of :mod:`posx.kernels.cope.native` per block where
  that is built (CPU, float32), keeping the same tensors for the backward.
- native (CPU, no gradient, float32, where it could be built): the fused C kernel of
  :mod:`posx.kernels.cope.native`, each query's nearest keys in one pass, the keys further back
  through the flash kernel. The two routes below are its PyTorch fallback.
- fused (CPU, no gradient): the position term is the float mask of the CPU's flash-attention
  kernel, which takes the content product, softmax and value product in one pass.
- band (CPU, no gradient, unit gaps, long sequences): gates are non-negative, so a position
  only grows from a query back over its keys, and from ``npos_max - 1`` on it is clamped
  there, where the position term is ``L_i[npos_max - 1]`` exactly. Once every query of a block
  has reached it within its ``band + 1`` nearest keys (checked on the block's own cumulative
  sums), the keys further back have ``scale q.k`` plus a per-query constant as their logits
  and go through the flash kernel without a mask; the two parts are merged by their
  log-sum-exps. A block whose queries have not all reached the top there is tried again with
  a wider band (the fused route once the band spans all its keys).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from posx.kernels.budget import query_block
from posx.kernels.cope.layer import (
    CoPELayer,
    FutureMasks,
    block_elements,
    interpolate,
    query_blocks,
    suffix_positions,
)
from posx.kernels.cope.native import NativeLayer, cope_native, native_layer
from posx.kernels.cope.native import block_backward as native_backward
from posx.kernels.flash import flash_available, flash_lse, merge_by_lse
from posx.kernels.relative import relative_shift

# Queries per block on the band route: its explicit part is [queries, queries + band] per head.
BAND_QUERIES = 64


def _scores(layer: CoPELayer, i0: int, i1: int, future: Tensor) -> tuple[Tensor, tuple]:
    """Logits of queries ``[i0, i1)`` and keys ``[0, i1)`` (last to first), and what their
    backward needs: gates, ``n``, ``p - n``, the steps at ``n`` and, with negative gaps, where
    positions were clamped at 0."""
    q, (k, _) = layer.q[..., i0:i1, :], layer.keys(0, i1)
    logits = (q @ k.transpose(-1, -2)).mul_(layer.scale)
    # Future keys get -inf logits, so gate 0; only the block's own keys (its first i1 - i0
    # columns) can be future ones.
    logits[..., : i1 - i0] += future
    gates = torch.sigmoid(logits)
    gaps = layer.block_gaps(i1)
    positions = suffix_positions(gates, gaps).clamp_(0, layer.top)
    # Below 0 (negative gaps only) the clamp has no slope, but the step at n = 0 is not 0.
    negative = positions == 0 if gaps is not None and bool((gaps < 0).any()) else None
    below, frac, lo, steps = interpolate(layer.table(q, i1), positions)
    return logits.add_(lo).addcmul_(frac, steps), (gates, below, frac, steps, negative)


def _scores_backward(
    dz: Tensor, saved: tuple, gaps: Tensor | None, columns: int
) -> tuple[Tensor, Tensor]:
    """For the gradient ``dz`` of :func:`_scores`' logits, those of the content scores (before
    their ``scale``) and of the integer-position logits ``L [.., columns]``.

    The position term's slope is the step at ``n``, which is 0 where positions were clamped at
    the top (there ``n = npos_max - 1``): ``dp = dz step[n]`` needs no clamp mask. The gates
    get the adjoint of the cumulative sum, and ``dc = dz + dg g (1 - g)``; ``L`` takes
    ``dz (1 - frac)`` at ``n`` and ``dz frac`` at ``n + 1``: two sums over ``n``.
    """
    gates, below, frac, steps, negative = saved
    dp = dz * steps
    if negative is not None:
        dp.masked_fill_(negative, 0)
    dsum = dp.flip(-1).cumsum_(-1).flip(-1)  # sums from each key to the last column
    if gaps is not None:
        gap = gaps[:, None, None, :] if gaps.dim() == 2 else gaps
        dsum = dsum.sub_(dp).mul_(gap).add_(dp)
    # dsum g (1 - g), written over dsum
    dcontent = torch.ops.aten.sigmoid_backward.grad_input(dsum, gates, grad_input=dsum).add_(dz)
    shape = (*dz.shape[:-1], columns)
    d_int = dz.new_zeros(shape).scatter_add_(-1, below, dz)
    d_step = dz.new_zeros(shape).scatter_add_(-1, below, dz * frac)
    d_int[..., 1:] += d_step[..., :-1]
    d_int[..., :-1] -= d_step[..., :-1]
    return dcontent, d_int


def _explicit(
    layer: CoPELayer,
    blocks: list[tuple[int, int]],
    keep: bool,
    fused: NativeLayer | None = None,
) -> tuple[Tensor, list]:
    """Every block's logits, softmax and value product; with ``keep``, what the backward
    needs (per block: the probabilities, then :func:`_scores`' five tensors). With ``fused``
    (the C kernel's layout of the same layer), each block is one call of the kernel."""
    futures, outputs, saved = FutureMasks(layer.q.device), [], []
    for i0, i1 in blocks:
        if fused is not None:
            # its backward is native_backward, which finds clamped positions itself
            out, (probs, *kept) = fused.block(i0, i1)
            kept.append(None)
        else:
            logits, kept = _scores(layer, i0, i1, futures[i1 - i0])
            probs = torch.softmax(logits, dim=-1)
            out = probs @ layer.keys(0, i1)[1]
        outputs.append(out)
        if keep:
            saved += [probs, *kept]
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs[::-1], dim=-2), saved


class CoPEAttention(torch.autograd.Function):
    """The explicit route for a whole layer as one autograd node: per block :func:`_scores`,
    softmax and value product; the backward walks the blocks with :func:`_scores_backward` and
    writes each block's gradients into the layer's (no per-block slices, flips or
    concatenations for autograd to undo, no clamp or frac masks, one gather per block).

    ``apply(q, k, v, emb, gaps, npos_max, block_size)``, arguments as :func:`cope_attention`'s
    (one floating dtype), returns ``[b, h, s, d_h]``.
    """

    @staticmethod
    def forward(  # noqa: D102 - documented on the class
        ctx: Any,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        emb: Tensor,
        gaps: Tensor | None,
        npos_max: int,
        block_size: int,
    ) -> Tensor:
        layer = CoPELayer(q, k, v, emb, gaps, npos_max)
        ctx.blocks = query_blocks(layer, block_size)
        fused = native_layer(layer)  # None: the PyTorch route
        out, saved = _explicit(layer, ctx.blocks, keep=True, fused=fused)
        ctx.save_for_backward(layer.q, layer.k, layer.v, emb, *saved)
        ctx.layer, ctx.native = layer, fused is not None
        ctx.gaps = None if fused is None else fused.gaps  # float32, as the kernel reads them
        return out

    @staticmethod
    def backward(ctx: Any, d_out: Tensor) -> tuple[Tensor | None, ...]:  # noqa: D102
        q, k, v, emb, *saved = ctx.saved_tensors
        layer, s, d = ctx.layer, q.shape[-2], q.shape[-1]
        dq = torch.empty_like(q)  # every block writes its queries' rows
        dk, dv, demb = (torch.zeros_like(t) for t in (k, v, emb))
        negatives = layer.gaps is not None and bool((layer.gaps < 0).any())
        for n, (i0, i1) in enumerate(ctx.blocks):
            probs, *kept = saved[6 * n : 6 * n + 6]
            qb, kb, vb = q[..., i0:i1, :], k[..., s - i1 :, :], v[..., s - i1 :, :]
            do = d_out[..., i0:i1, :]
            dv[..., s - i1 :, :] += probs.transpose(-1, -2) @ do
            dz = torch._softmax_backward_data(do @ vb.transpose(-1, -2), probs, -1, probs.dtype)
            cols = layer.columns(i1)
            if ctx.native:  # the kernel's tensors, and its backward
                args = (ctx.gaps, s, cols, negatives)
                dcontent, d_int = native_backward(dz, kept[:4], *args)
            else:
                dcontent, d_int = _scores_backward(dz, tuple(kept), layer.block_gaps(i1), cols)
            dq[..., i0:i1, :] = (dcontent @ kb).mul_(layer.scale) + d_int @ emb[:, :cols].T
            dk[..., s - i1 :, :] += (dcontent.transpose(-1, -2) @ qb).mul_(layer.scale)
            demb[:, :cols] += qb.reshape(-1, d).T @ d_int.reshape(-1, cols)
        return dq, dk.flip(-2), dv.flip(-2), demb, None, None, None


def _fused(layer: CoPELayer, i0: int, i1: int, future: Tensor) -> Tensor:
    """Queries ``[i0, i1)`` against keys ``[0, i1)`` without a gradient: the position term
    (and the future keys' ``-inf``) as the flash kernel's mask."""
    q, (k, v) = layer.q[..., i0:i1, :], layer.keys(0, i1)
    logits = (q @ k.transpose(-1, -2)).mul_(layer.scale)
    logits[..., : i1 - i0] += future
    gates = logits.sigmoid_()
    positions = suffix_positions(gates, layer.block_gaps(i1)).clamp_(0, layer.top)
    _, frac, lo, steps = interpolate(layer.table(q, i1), positions)
    mask = torch.addcmul(lo, frac, steps, out=frac)
    mask[..., : i1 - i0] += future
    return flash_lse(q, k, v, layer.scale, mask)[0]


def _band(layer: CoPELayer, i0: int, i1: int, band: int, future: Tensor) -> Tensor | float:
    """Queries ``[i0, i1)`` (``i0 >= band``, unit gaps) with positions over their ``band + 1``
    nearest keys; if some query's position has not reached ``npos_max - 1`` there, the lowest
    position reached instead.

    The explicit part is keys ``[i0 - band, i1)``: for query ``i0 + r``, its own key sits at
    column ``bq - 1 - r`` (keys last to first), its ``band + 1`` nearest keys are the
    :func:`~posx.kernels.relative.relative_shift` view of the block's content product, and the
    keys before those are clamped (position term ``L[top]``); keys before ``i0 - band`` are the
    far part.
    """
    bq, j0 = i1 - i0, i0 - band
    q, (k, v) = layer.q[..., i0:i1, :], layer.keys(j0, i1)
    content = q @ k.transpose(-1, -2)  # [b, h, bq, bq + band]
    near = relative_shift(content, band + 1)  # [b, h, bq, band + 1], from each query's key back
    positions = (near * layer.scale).sigmoid_().cumsum_(-1).clamp_(0, layer.top)
    reached = positions[..., -1].amin().item()
    if reached < layer.top:
        return reached
    table = layer.table(q, layer.s)
    top_logit = torch.view_as_real(table[..., layer.top :])[..., 0]  # [b, h, bq, 1]
    mask = top_logit.expand(content.shape).contiguous()
    _, frac, lo, steps = interpolate(table, positions)
    torch.addcmul(lo, frac, steps, out=relative_shift(mask, band + 1))
    mask[..., :bq] += future
    out, lse = flash_lse(q, k, v, layer.scale, mask)
    if j0 == 0:
        return out
    far, far_lse = flash_lse(q, *layer.keys(0, j0), layer.scale)
    return merge_by_lse(out, lse, far, far_lse + top_logit.squeeze(-1))


def _wider(band: int, reached: float, top: int) -> int:
    """The next band to try after the lowest position over ``band`` keys came to ``reached``:
    as many keys as reach ``top`` at the same gate density, and a quarter more (at least 16
    keys more, at most 5x), in multiples of 16."""
    want = band * top / max(reached, top / 4) * 1.25
    return -(-max(band + 16, int(want)) // 16) * 16


def _fused_blocks(layer: CoPELayer, block_size: int, band: int) -> Tensor:
    """Every query block through the fused route, or the band route where at least ``band``
    queries precede the block (``band`` 0: nowhere); ``[b, h, s, d_h]``."""
    b, h, s, _ = layer.q.shape
    futures, outputs, i1 = FutureMasks(layer.q.device), [], s
    budget = block_elements(layer.q.device)
    while i1 > 0:  # last block first (see query_blocks)
        out = None
        bq = query_block(min(block_size, BAND_QUERIES), b, h, band + BAND_QUERIES, budget)
        while band and out is None and i1 - bq >= band:
            out = _band(layer, i1 - bq, i1, band, futures[bq])
            if isinstance(out, float):  # some query's position is short of the top
                band, out = _wider(band, out, layer.top), None
        if out is None:
            # half the explicit route's blocks: at 1x and 4x the training length (2^18, 2^17,
            # 2^16 elements) one layer took 8.9, 6.3, 5.5 ms (tiny, 64 tokens) and 40, 31,
            # 32 ms (small, 256 tokens), the flash kernel's mask staying in cache
            bq = min(query_block(block_size, b, h, i1, budget // 2), i1)
            out = _fused(layer, i1 - bq, i1, futures[bq])
        outputs.append(out)
        i1 -= out.shape[-2]
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs[::-1], dim=-2)


def cope_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    emb: Tensor,
    npos_max: int,
    gaps: Tensor | None = None,
    block_size: int = 256,
) -> Tensor:
    """Causal CoPE attention, one query block at a time (module docstring).

    Args:
        q: Queries ``[b, h, s, d_h]``.
        k: Keys ``[b, h, s, d_h]``.
        v: Values ``[b, h, s, d_h]`` (another head size than ``q``'s takes the explicit route).
        emb: Position embeddings ``[d_h, npos_max]``.
        npos_max: Integer positions with an embedding; positions are clamped to the last.
        gaps: Position step into each key ``[s]`` or ``[b, s]``, or ``None`` for unit steps
            (the paper's count).
        block_size: Most queries per block; fewer where a block's scores would pass
            :func:`block_elements`.

    Returns:
        ``[b, h, s, d_h]`` in ``v``'s dtype.
    """
    # At least float32, under autocast too: bf16 gates summed over hundreds of keys misplace
    # p_ij. (float64 stays float64.)
    dtype = torch.promote_types(q.dtype, torch.float32)
    args = (q.to(dtype), k.to(dtype), v.to(dtype), emb.to(dtype), gaps, npos_max)
    with torch.autocast(q.device.type, enabled=False):
        if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, emb)):
            out = CoPEAttention.apply(*args, block_size)
        elif flash_available(q.device) and v.shape[-1] == q.shape[-1]:  # (flash: one size)
            # the first band tried: at the gates' initial mean of 1/2, positions reach the top
            # after 2 npos_max keys; a quarter more for their spread (then it adapts)
            band = 5 * npos_max // 2 if gaps is None else 0
            layer = CoPELayer(*args)
            out = cope_native(layer, args[1], args[2], band)
            if out is None:  # no fused C kernel here (or not for these inputs)
                out = _fused_blocks(layer, block_size, band)
        else:
            layer = CoPELayer(*args)
            out = _explicit(layer, query_blocks(layer, block_size), keep=False)[0]
    return out.to(v.dtype)
