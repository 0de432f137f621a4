"""Causal attention whose kernel is chosen from what the encoding declares.

- no bias, no ``attend``: ``scaled_dot_product_attention(is_causal=True)`` (flash on GPU);
- a bias: ``blocked`` over queries, each block building only its own ``[h, block, sk]`` bias
  (any device; the block shrinks at long lengths so one block's scores stay under a fixed
  element budget per device, ``posx.kernels.budget.block_budget``, which keeps memory linear
  in the sequence length), or ``flex``: FlexAttention with a ``score_mod`` that reads the bias
  from a per-distance table (``encoding.relative_bias``), compiled into a fused kernel, so no
  ``[s, s]`` tensor exists;
- ``attend``: the encoding's own computation, or, where it hands FlexAttention its scores
  (``encoding.flex_scores``: per-query tables read by a ``score_mod``, see
  :mod:`posx.kernels.flex.tables`) and ``flex`` is asked for, FlexAttention.

The model carries the choice (``TransformerLM(attention_kernel=...)``, see :data:`KERNELS`):
``auto`` takes ``flex`` for a bias on CUDA and ``blocked`` elsewhere, and ``attend`` for an
encoding that computes attention itself (its FlexAttention route is opt-in until a GPU run
measures it against ``attend``: ``make bench-gpu``'s ``[flex]`` rows); ``blocked`` never uses
FlexAttention (the fallback should a bias not compile); ``flex`` uses it on any device where
PyTorch can run it (on the CPU: forward only, since PyTorch has no FlexAttention backward
there). A bias that FlexAttention cannot take gets the blocked kernel;
:func:`flex_unsupported_reason` says why.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from posx.encodings.base import PositionalEncoding
from posx.kernels.bias import blocked_bias_attention
from posx.kernels.flex.attention import (
    FLEX_AVAILABLE,
    flex_bias_attention,
    flex_unsupported_reason,
    remember_flex_failure,
)
from posx.kernels.flex.tables import flex_scores_attention
from posx.kernels.memo import PositionMemo
from posx.model.rules import KERNELS, check_kernel

__all__ = ["KERNELS", "causal_attention", "check_kernel", "choose_kernel"]


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
        (FlexAttention: a bias's ``score_mod``, or the ``flex_scores`` of an encoding that
        computes attention itself) or ``"blocked"`` (query-blocked SDPA with a bias).
    """
    check_kernel(kernel)
    flex_runs = not (needs_grad and device.type != "cuda")
    # a score_mod whose gradient FlexAttention's compiled backward cannot take (FIRE's MLP)
    flex_runs = flex_runs and not (
        needs_grad and encoding.has_score_mod and not encoding.score_mod_trains
    )
    flex_runs = flex_runs and flex_unsupported_reason(encoding, flex_available) is None
    if encoding.has_attend:
        # Opt-in: auto keeps attend until a GPU measures both (scripts/bench_gpu.py's [flex]).
        takes_flex = kernel == "flex" and encoding.has_flex_scores and flex_runs
        return "flex" if takes_flex else "attend"
    if not encoding.has_bias:
        return "sdpa"
    if kernel == "blocked" or float_positions or not flex_runs:
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
    if chosen == "flex" and encoding.has_attend:

        def own() -> Tensor | None:
            scores = encoding.flex_scores(q, k, v, q_pos, k_pos)  # None: no exact route here
            return None if scores is None else flex_scores_attention(scores, v)

        out = _flex_or_none(encoding, "its own attention", own)
        if out is not None:
            return out
        chosen = "attend"
    if chosen == "attend":
        return encoding.attend(q, k, v, q_pos, k_pos)
    q, k = encoding.rotate(q, k, q_pos, k_pos)
    if chosen == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if chosen == "flex":

        def flex() -> Tensor:
            own = encoding.score_mod(q_pos, k_pos) if encoding.has_score_mod else None
            return flex_bias_attention(q, k, v, q_pos, k_pos, encoding.bias, score_mod=own)

        out = _flex_or_none(encoding, "blocked attention", flex)
        if out is not None:
            return out
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


def _flex_or_none(
    encoding: PositionalEncoding, fallback: str, run: Callable[[], Tensor | None]
) -> Tensor | None:
    """``run()``; where FlexAttention fails (a ``score_mod`` the compiler rejects, no C++
    compiler), ``None``, said once, and the encoding keeps its other kernel from then on.
    Running out of memory is raised: the other kernels would not fit either."""
    try:
        return run()
    except torch.OutOfMemoryError:
        raise
    except Exception as err:  # noqa: BLE001 - whatever the compiler rejects: fall back once
        remember_flex_failure(encoding, err)
        name = getattr(encoding, "owner_name", type(encoding).__name__)  # a layer's view: its owner
        warnings.warn(
            f"FlexAttention failed for {name} ({type(err).__name__}); using {fallback} for it",
            stacklevel=3,
        )
        return None


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
