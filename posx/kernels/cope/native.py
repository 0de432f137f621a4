"""CoPE on the CPU through its fused C kernel (``native/cope_band.c``).

Eager PyTorch computes a block's gates, positions and interpolated logits in a dozen passes over
``[queries, keys]`` tensors, each a separate op with its own dispatch and memory traffic: at 16x
the training length the tiny model spent 8.5 of its 14.5 ms per layer there, at 0.4x the speed
of a plain decoder. The kernel takes each query's keys in one pass, in the thread's cache, over
torch's own threads.

- Evaluation (:func:`cope_native`): each query's nearest keys in the kernel; the keys further
  back, where every position is clamped at the top, go through the flash kernel (one call per
  layer) and the two parts are merged by their log-sum-exps, as on the band route of
  :mod:`posx.kernels.cope.attention`.
- Training (:meth:`NativeLayer.block`): a block of the explicit route's forward, with what its
  hand-written backward keeps (probabilities, gates, positions' integer parts, fractions and
  steps), in the layout that backward reads.

Taken for float32 CPU tensors with a head width that is a multiple of 8 (keys and values of the
queries' shape), where the kernel could be built (:func:`posx.kernels.native.load`); elsewhere
:func:`native_layer` and :func:`cope_native` return ``None`` and the caller takes its PyTorch
routes. The two compute the same numbers up to the order of float32 sums: the kernel's gates are
``torch.sigmoid``'s bit for bit (SLEEF's e^x, as PyTorch's AVX2 and AVX-512 kernels take it)
and its positions are the gates added in double and rounded to float32, as ``torch.cumsum``
hands them over, so it stays within 2e-6 of the paper's code and x-transformers at 8-64
positions where the PyTorch route does (tests/unit/kernels/test_cope_peers.py), and at
thousands of positions its error against the formula in float64 is the route's (a float32
running sum would drift; tests/unit/kernels/test_cope_native.py holds it within 3x).
"""

from __future__ import annotations

import ctypes
import functools

import torch
from torch import Tensor

from posx.kernels import native
from posx.kernels.cope.layer import CoPELayer
from posx.kernels.flash import flash_available, flash_lse, merge_by_lse

SPARE = 64  # zero key columns after the last key: cope_band.c reads whole vectors past it
_PTR, _INT = ctypes.c_void_p, ctypes.c_int64


@functools.cache
def _library() -> ctypes.CDLL | None:
    lib = native.load("cope_band", ("cope_band", "cope_block", "cope_block_backward"))
    if lib is None:
        return None
    lib.cope_band.restype = lib.cope_block.restype = lib.cope_block_backward.restype = ctypes.c_int
    lib.cope_band.argtypes = [_PTR] * 8 + [_INT] * 8
    lib.cope_block.argtypes = [_PTR] * 11 + [_INT] * 9
    lib.cope_block_backward.argtypes = [_PTR] * 7 + [_INT] * 9
    return lib


def available() -> bool:
    """Whether the kernel is built and loaded in this process."""
    return _library() is not None


def _ptr(t: Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


class NativeLayer:
    """One layer's inputs in the kernel's layout, from the PyTorch routes' :class:`CoPELayer`
    (whose keys, values and gaps are already last to first): the queries, keys transposed with
    :data:`SPARE` zero columns, and the position embeddings with zero columns up to a multiple
    of 64 (the kernel computes 64 positions a step). The kernel scales ``q.k`` by ``1/sqrt(d_h)``
    after the product, as the PyTorch routes do.

    Build it with :func:`native_layer`, which checks that the kernel applies.
    """

    def __init__(self, layer: CoPELayer) -> None:
        b, h, s, d = layer.q.shape
        self.shape, self.npos_max = (b, h, s, d), layer.top + 1
        self.queries = layer.q.contiguous()
        self.keys_t = layer.q.new_zeros(b, h, d, s + SPARE)
        self.keys_t[..., :s] = layer.k.transpose(-1, -2)
        self.values = layer.v.contiguous()
        self.weights = layer.q.new_zeros(d, -(-self.npos_max // 64) * 64)
        self.weights[:, : self.npos_max] = layer.emb
        gaps = layer.gaps
        self.gaps = None if gaps is None else gaps.to(torch.float32).contiguous()
        self.gap_rows = 1 if gaps is None or gaps.dim() == 1 else gaps.shape[0]

    def _inputs(self) -> list[int | None]:
        return [_ptr(t) for t in (self.queries, self.keys_t, self.values, self.weights, self.gaps)]

    def band(self, width: int) -> tuple[Tensor, Tensor, Tensor]:
        """Evaluation's part: every query over its ``width`` nearest keys, or all of its keys
        where it has no more than ``width``, gaps are given, or its position falls short of the
        top there.

        Returns:
            ``(out [b, h, s, d_h], lse [b, h, s], full [b, h, s] bool)``: ``full`` where the
            query took every key (nothing further back to merge).
        """
        b, h, s, d = self.shape
        out, lse = torch.empty_like(self.queries), self.queries.new_empty(b, h, s)
        # on the inputs' device, not a default one (torch.device("meta") would hand the kernel
        # a pointer to nothing)
        full = torch.empty(b, h, s, dtype=torch.uint8, device=self.queries.device)
        failed = _library().cope_band(  # type: ignore[union-attr]
            *self._inputs(), _ptr(out), _ptr(lse), _ptr(full),
            b * h, h, s, d, width, self.npos_max - 1, self.gap_rows, torch.get_num_threads(),
        )  # fmt: skip
        self._check(failed)
        return out, lse, full.bool()

    def block(self, i0: int, i1: int) -> tuple[Tensor, list[Tensor]]:
        """Training: queries ``[i0, i1)`` with every key ``[0, i1)``, laid out as the explicit
        route's blocks (keys last to first).

        Returns:
            ``out [b, h, i1 - i0, d_h]`` and ``[probs, gates, below, frac, steps]``, each
            ``[b, h, i1 - i0, i1]`` (``below`` int32), for :func:`block_backward`. Only
            ``probs`` is written at future keys (0); the others hold what was in memory there.
        """
        b, h, s, d = self.shape
        bq = i1 - i0
        out = self.queries.new_empty(b, h, bq, d)
        probs, gates, frac, steps = (self.queries.new_empty(b, h, bq, i1) for _ in range(4))
        below = torch.empty(b, h, bq, i1, dtype=torch.int32, device=self.queries.device)
        failed = _library().cope_block(  # type: ignore[union-attr]
            *self._inputs(), *(_ptr(t) for t in (out, probs, gates, below, frac, steps)),
            b * h, h, s, d, i0, i1, self.npos_max - 1, self.gap_rows, torch.get_num_threads(),
        )  # fmt: skip
        self._check(failed)
        return out, [probs, gates, below, frac, steps]

    def _check(self, failed: int) -> None:
        _check(failed, self.shape)


def _check(failed: int, shape: tuple) -> None:
    if failed:
        raise MemoryError(f"cope_band: no memory for its per-thread buffers ({shape})")


def block_backward(
    dz: Tensor,
    kept: list[Tensor],
    gaps: Tensor | None,
    s: int,
    columns: int,
    negatives: bool,
) -> tuple[Tensor, Tensor]:
    """Training's backward through the logits of one of :meth:`NativeLayer.block`'s blocks,
    as ``cope._scores_backward`` computes it, in one pass per query row from its own key on.

    Args:
        dz: Gradient of the block's logits ``[b, h, bq, i1]``, contiguous float32 (0 at future
            keys, where the probabilities are 0); overwritten.
        kept: The block's ``[gates, below, frac, steps]``.
        gaps: :class:`NativeLayer`'s gaps (float32, last to first) or ``None``.
        s: The layer's length.
        columns: Integer positions the block can reach (``CoPELayer.columns``).
        negatives: Whether some gap is negative (positions clamped at 0 from below).

    Returns:
        ``(dcontent, d_int)``: the gradient of the content scores before their scale
        (``dz`` itself) and of the integer-position logits ``[b, h, bq, columns]``.
    """
    b, h, bq, i1 = dz.shape
    dz = dz.contiguous()  # (softmax's backward gives it so: no copy)
    gates, below, frac, steps = kept
    d_int = dz.new_empty(b, h, bq, columns)
    gap_rows = 1 if gaps is None or gaps.dim() == 1 else gaps.shape[0]
    failed = _library().cope_block_backward(  # type: ignore[union-attr]
        *(_ptr(t) for t in (dz, gates, below, frac, steps, gaps, d_int)),
        b * h, h, s, bq, i1, columns, gap_rows, int(negatives), torch.get_num_threads(),
    )  # fmt: skip
    _check(failed, tuple(dz.shape))
    return dz, d_int


def native_layer(layer: CoPELayer) -> NativeLayer | None:
    """The layer in the kernel's layout, or ``None`` where the kernel does not apply: not
    built, not every tensor float32 (gaps aside) on the CPU, a head width that is not a
    multiple of 8, or keys or values of another shape than the queries (the kernel reads
    them as rows of the queries' width)."""
    if _library() is None or layer.q.shape[-1] % 8:
        return None
    if layer.k.shape != layer.q.shape or layer.v.shape != layer.q.shape:
        return None
    tensors = [t for t in (layer.q, layer.k, layer.v, layer.emb, layer.gaps) if t is not None]
    if any(t.device.type != "cpu" for t in tensors) or any(
        t.dtype != torch.float32 for t in (layer.q, layer.k, layer.v, layer.emb)
    ):
        return None  # the kernel reads CPU float32 memory; anything else would crash it
    return NativeLayer(layer)


def cope_native(layer: CoPELayer, k: Tensor, v: Tensor, band: int) -> Tensor | None:
    """Causal CoPE attention without gradients, or ``None`` where the kernel does not apply.

    Args:
        layer: The layer as the PyTorch routes lay it out (queries, embeddings, gaps).
        k: Keys ``[b, h, s, d_h]`` in their own order (the far part's causal call).
        v: Values ``[b, h, s, d_h]``, likewise.
        band: With unit gaps, each query's positions are computed over its ``band + 1``
            nearest keys when they reach ``npos_max - 1`` there (else over all of its keys);
            the keys further back go through the flash kernel. Ignored with gaps.

    Returns:
        ``[b, h, s, d_h]`` float32, or ``None``.
    """
    fused = native_layer(layer) if flash_available(layer.q.device) else None
    if fused is None:
        return None
    q, s = layer.q, layer.s
    width = s if layer.gaps is not None else min(s, band + 1)
    out, lse, full = fused.band(width)
    if width >= s:
        return out
    # Query i's keys [0, i - width] have positions at the top: query row r of [width, s) sees
    # key columns <= r under the flash kernel's causal mask, one call for the layer.
    queries = q[..., width:, :]
    far, far_lse = flash_lse(
        queries, k[..., : s - width, :], v[..., : s - width, :], layer.scale, causal=True
    )
    far_lse += queries @ layer.emb[:, layer.top]  # their position term, L_i[top]
    far_lse.masked_fill_(full[..., width:], float("-inf"))  # rows that took every key
    out[..., width:, :] = merge_by_lse(out[..., width:, :], lse[..., width:], far, far_lse)
    return out
