"""CoPE's evaluation on the CPU through its fused C kernel (``native/cope_band.c``).

Eager PyTorch computes a block's gates, positions and interpolated logits in a dozen passes over
``[queries, keys]`` tensors, each a separate op with its own dispatch and memory traffic: at 16x
the training length the tiny model spent 8.5 of its 14.5 ms per layer there, at 0.4x the speed
of a plain decoder. The kernel takes each query's nearest keys in one pass, in the thread's
cache, over torch's own threads; the keys further back, where every position is clamped at the
top, still go through the flash kernel (one call per layer) and the two parts are merged by
their log-sum-exps, as on the band route of :mod:`posx.kernels.cope`.

Used for evaluation only (no gradient), float32, a head width that is a multiple of 8, and where
the kernel could be built (:func:`posx.kernels.native.load`); elsewhere :func:`cope_native`
returns ``None`` and the caller takes its PyTorch routes, which give the same numbers.
"""

from __future__ import annotations

import ctypes
import functools

import torch
from torch import Tensor

from posx.kernels import native
from posx.kernels.flash import flash_available, flash_lse, merge_by_lse

SPARE = 64  # zero key columns after the last key: cope_band.c reads whole vectors past it


@functools.cache
def _kernel() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    lib = native.load("cope_band")
    if lib is None:
        return None
    fn = lib.cope_band
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p] * 8 + [ctypes.c_int64] * 8
    return fn


def available() -> bool:
    """Whether the kernel is built and loaded in this process."""
    return _kernel() is not None


def near_part(
    q: Tensor, k: Tensor, v: Tensor, emb: Tensor, gaps: Tensor | None, npos_max: int, width: int
) -> tuple[Tensor, Tensor, Tensor]:
    """The kernel's part: every query over its ``width`` nearest keys, or all of its keys where
    it has no more than ``width``, gaps are given, or its position falls short of the top there.

    Arguments as :func:`cope_native`'s (float32, ``d_h`` a multiple of 8, the kernel loaded).

    Returns:
        ``(out [b, h, s, d_h], lse [b, h, s], full [b, h, s] bool)``: ``full`` where the query
        took every key (nothing further back to merge).
    """
    kernel = _kernel()
    if kernel is None:
        raise RuntimeError("the cope_band kernel is not loaded")
    b, h, s, d = q.shape
    scale = d**-0.5
    queries = (q * scale).contiguous()
    keys_t = q.new_zeros(b, h, d, s + SPARE)  # keys last to first, transposed
    keys_t[..., :s] = k.flip(-2).transpose(-1, -2)
    values = v.flip(-2).contiguous()
    # q_scaled (E / scale) = q E: the position logits from the queries the kernel reads anyway;
    # zero columns up to a multiple of 64 (the kernel computes 64 positions a step)
    weights = q.new_zeros(d, -(-npos_max // 64) * 64)
    weights[:, :npos_max] = emb / scale
    rev_gaps = None if gaps is None else gaps.flip(-1).to(torch.float32).contiguous()
    out, lse = torch.empty_like(queries), q.new_empty(b, h, s)
    full = torch.empty(b, h, s, dtype=torch.uint8, device=q.device)  # not a default device
    failed = kernel(
        queries.data_ptr(),
        keys_t.data_ptr(),
        values.data_ptr(),
        weights.data_ptr(),
        None if rev_gaps is None else rev_gaps.data_ptr(),
        out.data_ptr(),
        lse.data_ptr(),
        full.data_ptr(),
        b * h,
        h,
        s,
        d,
        width,
        npos_max - 1,
        1 if rev_gaps is None or rev_gaps.dim() == 1 else rev_gaps.shape[0],
        torch.get_num_threads(),
    )
    if failed:
        raise MemoryError(f"cope_band: no memory for its per-thread buffers ({s} keys)")
    return out, lse, full.bool()


def cope_native(
    q: Tensor, k: Tensor, v: Tensor, emb: Tensor, gaps: Tensor | None, npos_max: int, band: int
) -> Tensor | None:
    """Causal CoPE attention without gradients, or ``None`` where the kernel does not apply.

    Args:
        q: Queries ``[b, h, s, d_h]``.
        k: Keys ``[b, h, s, d_h]``.
        v: Values ``[b, h, s, d_h]``.
        emb: Position embeddings ``[d_h, npos_max]``.
        gaps: Position step into each key ``[s]`` or ``[b, s]``, or ``None`` for unit steps.
        npos_max: Integer positions with an embedding; positions are clamped to the last.
        band: With unit gaps, each query's positions are computed over its ``band + 1``
            nearest keys when they reach ``npos_max - 1`` there (else over all of its keys);
            the keys further back go through the flash kernel. Ignored with gaps.

    Returns:
        ``[b, h, s, d_h]`` float32, or ``None``.
    """
    s, d = q.shape[-2:]
    if _kernel() is None or d % 8 or not flash_available(q.device):
        return None
    tensors = [t for t in (q, k, v, emb, gaps) if t is not None]
    if any(t.device.type != "cpu" for t in tensors) or any(
        t.dtype != torch.float32 for t in (q, k, v, emb)
    ):
        return None  # the kernel reads CPU float32 memory; anything else would crash it
    width = s if gaps is not None else min(s, band + 1)
    out, lse, full = near_part(q, k, v, emb, gaps, npos_max, width)
    if width >= s:
        return out
    # Query i's keys [0, i - width] have positions at the top: query row r of [width, s) sees
    # key columns <= r under the flash kernel's causal mask, one call for the layer.
    queries = q[..., width:, :]
    far, far_lse = flash_lse(
        queries, k[..., : s - width, :], v[..., : s - width, :], d**-0.5, causal=True
    )
    far_lse += queries @ emb[:, npos_max - 1]  # their position term, L_i[top]
    far_lse.masked_fill_(full[..., width:], float("-inf"))  # rows that took every key
    out[..., width:, :] = merge_by_lse(out[..., width:, :], lse[..., width:], far, far_lse)
    return out
