"""RoPE's rotation as one autograd node: q and k multiplied by complex rotations in the
layout they are stored in, and the backward the conjugate rotation of the incoming gradient
(nothing saved but the rotations). :class:`~posx.encodings.rope.RoPE` builds the rotations;
this module only applies them.

The fused route (opt-in, ``RoPE.fused_rotation``; issue 47): on CUDA a step is bound by kernel
launches, and the bf16 rotation (autocast's) is a copy, two multiplies and an add per tensor,
each a kernel, and as many again backward. :func:`turn_pairs` is the same rotation as one
elementwise expression, which :func:`fused_turn` compiles (Inductor, dynamic shapes) into one
kernel per tensor, forward and backward. Where compiling fails it says so once and returns
``None``: the caller keeps its eager rotation.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

#: Device types the fused route compiles for (Inductor's Triton kernels). Elsewhere the eager
#: routes stay: the CPU's complex multiply is one pass already, and a compile costs seconds.
FUSED_DEVICES = ("cuda",)
# Why the fused rotation failed in this process (then it is not tried again), else None.
_FUSED_FAILED: list[str] = []


def turn_pairs(x: Tensor, cos: Tensor, sin: Tensor, rot_dim: int, scale: float) -> Tensor:
    """RoPE's rotation as one elementwise expression (the fused route's function).

    Pair ``(x_{2i}, x_{2i+1}) -> (x_{2i} cos - x_{2i+1} sin, x_{2i} sin + x_{2i+1} cos)`` over
    the first ``rot_dim`` dims, the rest times ``scale``: what :func:`turn_complex` and
    ``RoPE.turn_with`` compute, in float32 (float64 stays float64) and rounded once to
    ``x``'s dtype (the eager bf16 route rounds the rotation and each product to bf16).

    Args:
        x: ``[b, h, s, d_h]`` in any layout (e.g. a strided view of the fused qkv projection).
        cos: ``[(b,) 1, s, r/2]`` float32, the attention scale folded in.
        sin: Same shape as ``cos``.
        rot_dim: ``r``, the rotated width (even).
        scale: Factor of the pass-through dims (the attention scale).

    Returns:
        ``[b, h, s, d_h]`` in ``x``'s dtype.
    """
    work = torch.promote_types(x.dtype, torch.float32)
    pairs = x[..., :rot_dim].unflatten(-1, (rot_dim // 2, 2)).to(work)
    x0, x1 = pairs[..., 0], pairs[..., 1]
    cos, sin = cos.to(work), sin.to(work)
    out = torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1).flatten(-2)
    if rot_dim < x.shape[-1]:
        out = torch.cat((out, x[..., rot_dim:].to(work) * scale), dim=-1)
    return out.to(x.dtype)


@functools.cache
def compiled_turn() -> Callable[..., Tensor]:
    """:func:`turn_pairs` compiled once per process, with dynamic shapes (one kernel for every
    length and batch)."""
    return torch.compile(turn_pairs, dynamic=True)


def fused_available(device: torch.device) -> bool:
    """Whether the fused route runs on ``device``: a device of :data:`FUSED_DEVICES` and no
    compile failure in this process so far."""
    return device.type in FUSED_DEVICES and not _FUSED_FAILED


def fused_turn(x: Tensor, cos: Tensor, sin: Tensor, rot_dim: int, scale: float) -> Tensor | None:
    """:func:`turn_pairs` through :func:`compiled_turn`: one kernel per tensor.

    Args:
        x: ``[b, h, s, d_h]``.
        cos: ``[(b,) 1, s, r/2]`` float32.
        sin: Same shape as ``cos``.
        rot_dim: The rotated width.
        scale: Factor of the pass-through dims.

    Returns:
        ``[b, h, s, d_h]``; ``None`` where compiling fails (no C compiler or Triton, a lowering
        error), said once in a warning, and from then on in this process (the caller keeps
        its eager rotation). Running out of memory is raised: the eager route would not fit
        either. A failure of the backward's compile (at the first backward) is raised.
    """
    if _FUSED_FAILED:
        return None
    try:
        return compiled_turn()(x, cos, sin, rot_dim, scale)
    except torch.OutOfMemoryError:
        raise
    except Exception as err:  # noqa: BLE001 - whatever the compiler rejects: fall back once
        _FUSED_FAILED.append(f"{type(err).__name__}: {err}".splitlines()[0])
        warnings.warn(
            f"the fused RoPE rotation failed to compile ({_FUSED_FAILED[0]}); "
            "using the eager rotation",
            stacklevel=3,
        )
        return None


def turn_complex(x: Tensor, rotations: tuple[Tensor, Tensor], rot_dim: int, scale: float) -> Tensor:
    """``x [b, h, s, d_h]``'s first ``rot_dim`` dims (pairs) times a complex rotation, the rest
    times ``scale``; a new tensor laid out as ``x`` is (heads inside or outside positions).

    An elementwise multiply over q's strided view of the fused qkv projection (``[b, s, h, d_h]``
    in memory) by a rotation broadcast over heads runs its inner loop over one head's ``d_h/2``
    pairs at a time: 2.5x slower at ``d_h`` 16 than one whose operands are dense in memory
    order. So the rotation comes in both layouts, ``[(b,) 1, s, r/2]`` and ``[(b,) s, h, r/2]``
    (materialised over heads), and the multiply runs in the one ``x`` is stored in; the
    gradients SDPA returns come in either.

    Args:
        x: ``[b, h, s, d_h]``.
        rotations: The rotation (or its conjugate) ``[(b,) 1, s, r/2]`` and ``[(b,) s, h, r/2]``
            (empty: multiplied by the first, broadcast over heads).
        rot_dim: ``r``, the rotated width.
        scale: Factor of the pass-through dims (the attention scale).
    """
    heads_inside = x.stride(1) < x.stride(2) and rotations[1].numel() > 0  # [b, s, h, d_h]
    y, rotation = (x.transpose(1, 2), rotations[1]) if heads_inside else (x, rotations[0])
    pairs = complex_view(y, rotation.dtype) if rot_dim == y.shape[-1] else None
    if pairs is not None:
        out = (pairs * rotation).view(y.dtype)
    else:  # a copy in memory order, rotated in place
        out = y.contiguous() if not y.is_contiguous() else y.clone()
        torch.view_as_complex(out[..., :rot_dim].unflatten(-1, (-1, 2))).mul_(rotation)
        if rot_dim < y.shape[-1] and scale != 1.0:
            out[..., rot_dim:].mul_(scale)  # the temperature applies to the whole score
    return out.transpose(1, 2) if heads_inside else out


def complex_view(x: Tensor, dtype: torch.dtype) -> Tensor | None:
    """``x [.., d]`` as complex ``[.., d/2]`` pairs without a copy, else ``None`` (the last dim
    not dense, or an odd stride or offset)."""
    try:
        return x.view(dtype)
    except RuntimeError:
        return None


def qk_rows(q: Tensor, k: Tensor) -> Tensor | None:
    """The q and k as one ``[b, s, 2, h, d_h]`` view when they are the model's views of one fused
    qkv projection (rows ``[.., q heads, k heads, ..]`` per token), else ``None``.

    Rotating both in one multiply halves the per-call cost, which dominates at small widths.
    """
    b, h, s, d = q.shape
    st = q.stride()
    if (
        k.stride() != st
        or k.shape != q.shape
        or (st[3], st[1]) != (1, d)  # heads side by side within a token's row
        or st[2] < 2 * h * d
        or k.storage_offset() - q.storage_offset() != h * d
        or k.dtype != q.dtype
        or k.untyped_storage().data_ptr() != q.untyped_storage().data_ptr()
    ):
        return None
    return q.as_strided((b, s, 2, h, d), (st[0], st[2], h * d, d, 1), q.storage_offset())


class Turn(torch.autograd.Function):
    """RoPE's rotation of q and k as one autograd node.

    The rotation is linear in ``x`` with a constant complex factor ``c`` per pair (``|c|`` is
    the attention scale), so the gradient is the incoming one times ``conj(c)`` (the pass-through
    dims: times the scale): nothing from the forward is kept but the (shared, memoised)
    conjugates, and the backward is one multiply per tensor instead of autograd's view,
    multiply, conj and view nodes.
    """

    @staticmethod
    def forward(
        ctx: Any,
        q: Tensor,
        k: Tensor,
        q_rots: tuple[Tensor, ...],
        k_rots: tuple[Tensor, ...],
        rot_dim: int,
        scale: float,
    ) -> tuple[Tensor, Tensor]:
        # Memoised constants without autograd history: kept on ctx, not saved as activations.
        ctx.rots, ctx.rot_dim, ctx.scale = (q_rots[2:4], k_rots[2:4]), rot_dim, scale
        joint = q_rots is k_rots and rot_dim == q.shape[-1] and q_rots[4].numel() > 0
        rows = qk_rows(q, k) if joint else None
        pairs = None if rows is None else complex_view(rows, q_rots[4].dtype)
        if pairs is not None:
            out = (pairs * q_rots[4]).view(q.dtype)  # [b, s, 2, h, d_h]
            q_out, k_out = out.permute(2, 0, 3, 1, 4)
            return q_out, k_out
        return (
            turn_complex(q, q_rots[:2], rot_dim, scale),
            turn_complex(k, k_rots[:2], rot_dim, scale),
        )

    @staticmethod
    def backward(
        ctx: Any, grad_q: Tensor | None, grad_k: Tensor | None
    ) -> tuple[Tensor | None, ...]:
        (q_conj, k_conj), r, scale = ctx.rots, ctx.rot_dim, ctx.scale
        dq = None if grad_q is None else turn_complex(grad_q, q_conj, r, scale)
        dk = None if grad_k is None else turn_complex(grad_k, k_conj, r, scale)
        return dq, dk, None, None, None, None
