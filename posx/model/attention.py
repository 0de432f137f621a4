"""Causal attention whose kernel is chosen from what the encoding declares.

- no bias, no ``attend``: ``scaled_dot_product_attention(is_causal=True)`` (flash on GPU);
- a bias, on CUDA: FlexAttention with a ``score_mod`` that adds ``encoding.bias`` for one
  (query, key) pair, compiled into a fused kernel, so no ``[s, s]`` tensor ever exists;
- a bias, elsewhere: blocked over queries, each block building only its own ``[h, block, sk]``
  bias; the block shrinks at long lengths so one block's scores stay under a fixed element
  budget (``posx.encodings.blocked.MAX_BLOCK_ELEMENTS``), which keeps memory linear in the
  sequence length;
- ``attend``: the encoding's own computation.

``POSX_ATTENTION=blocked`` forces the blocked kernel on CUDA too (a fallback should a custom
bias not compile under FlexAttention).
"""

from __future__ import annotations

import functools
import os
import warnings
import weakref
from collections.abc import Callable, Hashable

import torch
import torch.nn.functional as F
from torch import Tensor

from posx.encodings.base import PositionalEncoding
from posx.encodings.blocked import future_bias, query_block
from posx.encodings.memo import PositionMemo

BiasFn = Callable[[Tensor, Tensor], Tensor]

try:  # FlexAttention arrived in torch 2.5; without it every bias takes the blocked path.
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    FLEX_AVAILABLE = True
except ImportError:  # pragma: no cover - depends on the installed torch
    FLEX_AVAILABLE = False


def choose_kernel(
    encoding: PositionalEncoding, device: torch.device, flex_available: bool = FLEX_AVAILABLE
) -> str:
    """The attention kernel for ``encoding`` on ``device``.

    Returns:
        ``"attend"`` (the encoding's own), ``"sdpa"`` (fused causal, no bias), ``"flex"``
        (FlexAttention ``score_mod``; CUDA only, since it is forward-only on CPU and training
        needs gradients) or ``"blocked"`` (query-blocked SDPA with a bias, any device).
    """
    if encoding.has_attend:
        return "attend"
    if not encoding.has_bias:
        return "sdpa"
    forced = os.environ.get("POSX_ATTENTION", "auto")
    if (
        device.type == "cuda"
        and flex_available
        and forced != "blocked"
        and flex_ok(encoding, device)
    ):
        return "flex"
    return "blocked"


# encoding -> whether its bias runs inside a score_mod (probed once per instance)
_FLEX_OK: weakref.WeakKeyDictionary[PositionalEncoding, bool] = weakref.WeakKeyDictionary()


def flex_ok(encoding: PositionalEncoding, device: torch.device) -> bool:
    """Whether ``encoding.bias`` can run inside a FlexAttention ``score_mod``.

    A bias qualifies when it is traceable for one (query, key) pair: no data-dependent Python
    (``.item()``, ``int(tensor)``, shapes from values). This is probed once per encoding with
    FlexAttention's eager reference on a 3-token input on ``device``, the one attention runs on;
    a bias that fails falls back to the blocked kernel, so any encoding works and traceable ones
    get the fused kernel.
    """
    if encoding not in _FLEX_OK:
        _FLEX_OK[encoding] = _probe_flex(encoding, device)
    return _FLEX_OK[encoding]


def _probe_flex(encoding: PositionalEncoding, device: torch.device) -> bool:
    # The device comes from the caller: a per-layer view holds no tensors to read it from.
    try:
        pos = torch.arange(3, device=device)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the eager reference warns that it is unfused
            heads = encoding.bias(pos[:1], pos[:1]).shape[-3]
            q = torch.zeros(1, heads, 3, 16, device=device)
            flex_bias_attention(q, q, q, pos, pos, encoding.bias, compile=False)
        return True
    except Exception:  # noqa: BLE001 - any failure to trace means "use the blocked kernel"
        return False


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
        block_size: Most queries per block on the blocked bias path.

    Returns:
        ``[b, h, s, d_h]``.
    """
    kernel = choose_kernel(encoding, q.device)
    if kernel == "attend":
        return encoding.attend(q, k, v, q_pos, k_pos)
    q, k = encoding.rotate(q, k, q_pos, k_pos)
    if kernel == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if kernel == "flex":
        try:
            return flex_bias_attention(q, k, v, q_pos, k_pos, encoding.bias)
        except torch.OutOfMemoryError:
            raise
        except Exception as err:  # noqa: BLE001 - a bias the compiler rejects: fall back once
            _FLEX_OK[encoding] = False
            warnings.warn(
                f"FlexAttention failed for {type(encoding).__name__} ({type(err).__name__}); "
                "using blocked attention for it",
                stacklevel=2,
            )
    return blocked_bias_attention(
        q, k, v, q_pos, k_pos, encoding.bias, block_size, _bias_memo(encoding)
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

    Returns:
        ``[b, h, s, d_h]``.
    """
    if block_size <= 0:
        raise ValueError(f"attention block_size must be positive, got {block_size}")
    b, h, s, _ = q.shape
    step = query_block(block_size, b, h, s)
    outputs = []
    # Last block first: its temporaries are the largest, so every later (smaller) block fits in
    # memory the allocator already holds. Growing blocks would each need a fresh, larger chunk,
    # and on CPU the heap keeps the smaller freed ones: RSS several times the live tensors.
    for i0 in reversed(range(0, s, step)):
        i1 = min(s, i0 + step)
        qp, kp = q_pos[..., i0:i1], k_pos[..., :i1]

        def masked_bias(qp: Tensor = qp, kp: Tensor = kp, i0: int = i0, i1: int = i1) -> Tensor:
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


def _attention_with_learned_bias(q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
    """``softmax(q k^T / sqrt(d_h) + bias) v`` for a bias that needs a gradient, on CPU.

    SDPA's fused CPU kernel has no gradient for its mask, so SDPA falls back to its generic
    math path, which also guards against fully masked rows (there are none here: every query
    sees itself). Written out, the same computation is ~20% faster.
    """
    scores = torch.add(bias, q @ k.transpose(-1, -2), alpha=q.shape[-1] ** -0.5)
    return torch.softmax(scores.float(), dim=-1).to(v.dtype) @ v


def _causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    return q_idx >= kv_idx


@functools.lru_cache(maxsize=16)
def _causal_block_mask(sq: int, sk: int, device: str) -> object:
    # Depends only on the sizes, so one mask serves every layer and batch of a length.
    return create_block_mask(_causal, None, None, sq, sk, device=device)


@functools.cache
def _compiled_flex() -> Callable[..., Tensor]:
    return torch.compile(flex_attention, dynamic=False)


def flex_bias_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_pos: Tensor,
    k_pos: Tensor,
    bias_fn: BiasFn,
    compile: bool = True,
) -> Tensor:
    """Causal attention with the bias added inside FlexAttention's ``score_mod``.

    The ``score_mod`` calls ``bias_fn`` on the single (query, key) position pair it is given,
    so any bias that is a function of positions works without an encoding-specific kernel;
    compiled, it never materialises a score or bias matrix.

    Args:
        q: Queries ``[b, h, s, d_h]``.
        k: Keys ``[b, h, s, d_h]``.
        v: Values ``[b, h, s, d_h]``.
        q_pos: Query positions ``[s]`` or ``[b, s]``.
        k_pos: Key positions ``[s]`` or ``[b, s]``.
        bias_fn: ``(q_pos [1], k_pos [1]) -> [(1,) h, 1, 1]``.
        compile: Use the compiled fused kernel (``False``: the eager reference, which
            materialises the scores; for tests on CPU).

    Returns:
        ``[b, h, s, d_h]``.
    """
    per_row = q_pos.dim() == 2

    def score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        qp = (q_pos[b, q_idx] if per_row else q_pos[q_idx]).reshape(1)
        kp = (k_pos[b, kv_idx] if per_row else k_pos[kv_idx]).reshape(1)
        bias = bias_fn(qp, kp)  # [h, 1, 1] or [1, h, 1, 1]
        return score + bias.reshape(-1)[h]

    mask = _causal_block_mask(q.shape[-2], k.shape[-2], str(q.device))
    attend = _compiled_flex() if compile else flex_attention
    return attend(q, k, v, score_mod=score_mod, block_mask=mask)
