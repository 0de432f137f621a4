"""FlexAttention for biases: a ``score_mod`` that reads a per-distance table, or the encoding's.

FlexAttention's compiler (Inductor, on CUDA and CPU alike) lowers a ``score_mod`` as scalar code.
A ``score_mod`` that calls an encoding's vectorised ``bias`` on one (query, key) pair and picks
head ``h`` from the ``[h]`` result does not lower: a reshape fails to compile, and a per-head
vector indexed by ``h`` compiles to wrong values. So the bias is evaluated eagerly, once per
distance, into a ``[h, distances]`` table (with its autograd history), and the ``score_mod``
indexes that table: exact for an encoding whose bias depends on ``q - k`` alone
(``encoding.relative_bias``). An encoding whose bias reads more (FIRE: the query's own position)
gives its own scalar ``score_mod`` (``encoding.score_mod``, see :mod:`posx.kernels.flex.mods`);
any other bias keeps the blocked kernel. Encodings that compute attention themselves may hand
FlexAttention their scores too (``encoding.flex_scores``, :mod:`posx.kernels.flex.tables`).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor

BiasFn = Callable[[Tensor, Tensor], Tensor]
# FlexAttention's score_mod: (score, b, h, q_idx, kv_idx) -> score, all tensors
ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]

try:  # FlexAttention arrived in torch 2.5; without it every bias takes the blocked path.
    from torch.nn.attention.flex_attention import BlockMask, flex_attention

    FLEX_AVAILABLE = True
except ImportError:  # pragma: no cover - depends on the installed torch
    FLEX_AVAILABLE = False

try:  # torch >= 2.9 asks for the log-sum-exp this way (return_lse is deprecated there)
    from torch.nn.attention.flex_attention import AuxRequest
except ImportError:  # pragma: no cover - depends on the installed torch
    AuxRequest = None


class BiasEncoding(Protocol):
    """What FlexAttention reads of an encoding. :class:`posx.encodings.base.PositionalEncoding`
    satisfies it; kernels sit below the encodings and never import them."""

    relative_bias: bool

    @property
    def has_bias(self) -> bool: ...

    @property
    def has_score_mod(self) -> bool: ...

    @property
    def has_flex_scores(self) -> bool: ...


# encoding -> why FlexAttention failed for it once (it then keeps the blocked kernel)
_FLEX_FAILED: weakref.WeakKeyDictionary[BiasEncoding, str] = weakref.WeakKeyDictionary()


def flex_unsupported_reason(
    encoding: BiasEncoding, flex_available: bool = FLEX_AVAILABLE
) -> str | None:
    """Why ``encoding``'s bias cannot run in FlexAttention, or ``None`` when it can.

    FlexAttention's compiler lowers a ``score_mod`` as scalar code: it cannot call a bias that
    builds a per-head vector (it fails or, worse, compiles to wrong values). posx therefore
    evaluates the bias once per distance into a ``[h, distances]`` table and the ``score_mod``
    reads one entry, which is exact only for a bias of ``q - k`` alone (``relative_bias``).
    An encoding that computes attention itself runs there only through its own
    ``flex_scores`` (:mod:`posx.kernels.flex.tables`).
    """
    if not flex_available:
        return "this torch has no FlexAttention (it needs torch >= 2.5)"
    if encoding.has_flex_scores:
        return _FLEX_FAILED.get(encoding)
    if not encoding.has_bias:
        return f"{type(encoding).__name__} adds no attention bias"
    if not (encoding.relative_bias or encoding.has_score_mod):
        return (
            f"{type(encoding).__name__}'s bias is not a function of the distance q - k alone "
            "(relative_bias is False), so no per-distance table can stand for it, and it has "
            "no score_mod of its own"
        )
    return _FLEX_FAILED.get(encoding)


def remember_flex_failure(encoding: BiasEncoding, err: Exception) -> None:
    """Records why FlexAttention failed for ``encoding``: it keeps the blocked kernel after."""
    _FLEX_FAILED[encoding] = f"FlexAttention failed for it: {type(err).__name__}: {err}"


def _causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    return q_idx >= kv_idx


# FlexAttention's tile: the block mask says, per (query tile, key tile), skip, full or partial.
FLEX_BLOCK = 128


@functools.lru_cache(maxsize=16)
def causal_block_mask(sq: int, sk: int, device: str) -> BlockMask:
    """The causal ``BlockMask`` (``q_idx >= kv_idx``) for ``sq`` queries and ``sk`` keys.

    Built from its tiles' bounds, ``O((sq / 128) (sk / 128))``: ``create_block_mask`` evaluates
    the mask on every (query, key) pair first, eagerly (about 10 bytes a pair: 10 GiB at 32k
    tokens on an H200, 15x the memory at 8k), which broke evaluation's memory bound on CUDA.
    Depends only on the sizes, so one mask serves every layer and batch of a length.

    Args:
        sq: Queries.
        sk: Keys.
        device: Where the mask's tensors live.

    Returns:
        The block mask: a key tile is full when it and the query tile are whole and its last
        key is at or before the query tile's first query, partial when some of its keys are
        visible, skipped otherwise (what ``create_block_mask`` gives).
    """
    tiles_q = torch.arange(-(-sq // FLEX_BLOCK), device=device)
    tiles_k = torch.arange(-(-sk // FLEX_BLOCK), device=device)
    first_q, last_q = tiles_q * FLEX_BLOCK, ((tiles_q + 1) * FLEX_BLOCK).clamp(max=sq) - 1
    first_k, last_k = tiles_k * FLEX_BLOCK, ((tiles_k + 1) * FLEX_BLOCK).clamp(max=sk) - 1
    # Full only if the tile is whole too: create_block_mask counts a ragged last tile as partial
    # (its padding is masked), and the kernel then applies the mask there.
    whole_q, whole_k = last_q - first_q == FLEX_BLOCK - 1, last_k - first_k == FLEX_BLOCK - 1
    full = (last_k[None, :] <= first_q[:, None]) & whole_q[:, None] & whole_k[None, :]
    partial = (first_k[None, :] <= last_q[:, None]) & ~full

    def tiles(chosen: Tensor) -> tuple[Tensor, Tensor]:
        # counts [1, 1, tiles_q]; indices [1, 1, tiles_q, tiles_k]: the chosen tiles first
        order = torch.sort((~chosen).to(torch.int8), dim=-1, stable=True).indices
        return chosen.sum(-1).to(torch.int32)[None, None], order.to(torch.int32)[None, None]

    return BlockMask.from_kv_blocks(
        *tiles(partial), *tiles(full), BLOCK_SIZE=FLEX_BLOCK, mask_mod=_causal, seq_lengths=(sq, sk)
    )


# Compiled FlexAttention kernels kept per process. Each length, positions' layout and kind of
# score_mod is its own kernel; at dynamo's default (8 per function) a long evaluation sweep or a
# benchmark of several encodings would pass the limit, and past it torch runs FlexAttention
# unfused, building every [b, h, s, s] score: no error, only quadratic memory.
FLEX_RECOMPILES = 256


@functools.cache
def _compiled_flex() -> Callable[..., Tensor]:
    compiled = torch.compile(flex_attention, dynamic=False)

    def call(*args: object, **kwargs: object) -> Tensor:
        limit = max(torch._dynamo.config.recompile_limit, FLEX_RECOMPILES)
        with torch._dynamo.config.patch(recompile_limit=limit):
            return compiled(*args, **kwargs)

    return call


def position_reader(q_pos: Tensor, k_pos: Tensor) -> Callable[..., tuple[Tensor, Tensor]]:
    """``(b, q_idx, kv_idx) -> (q_pos, k_pos)`` of a pair, in a ``score_mod``'s scalar code
    (its indexing also broadcasts over index grids).

    Args:
        q_pos: Query positions ``[sq]`` or ``[b, sq]``.
        k_pos: Key positions ``[sk]`` or ``[b, sk]`` (the same layout as ``q_pos``).
    """
    if q_pos.dim() == 2:
        return lambda b, q_idx, kv_idx: (q_pos[b, q_idx], k_pos[b, kv_idx])
    return lambda b, q_idx, kv_idx: (q_pos[q_idx], k_pos[kv_idx])


def distance_table(q_pos: Tensor, k_pos: Tensor, bias_fn: BiasFn) -> tuple[Tensor, Tensor]:
    """A relative bias evaluated once per distance, for a ``score_mod`` to index.

    Covers every ``q_pos - k_pos`` the positions can form (negative ones too: explicit positions
    need not increase), padded to a power of two so that a batch with other positions but a
    similar spread reuses the compiled kernel.

    Args:
        q_pos: Integer query positions ``[sq]`` or ``[b, sq]``.
        k_pos: Integer key positions ``[sk]`` or ``[b, sk]``.
        bias_fn: A bias of ``q - k`` alone: ``(q_pos [n], k_pos [1]) -> [h, n, 1]``.

    Returns:
        ``(table [h, n], lowest)``: ``table[:, d - lowest]`` is the bias at distance ``d``;
        ``lowest`` is a 0-d tensor (a value, so a new one does not recompile).
    """
    lowest = q_pos.min() - k_pos.max()
    span = int(q_pos.max() - k_pos.min() - lowest) + 1
    n = 1 << (span - 1).bit_length()
    return bias_per_distance(bias_fn, lowest + torch.arange(n, device=q_pos.device)), lowest


def bias_per_distance(bias_fn: BiasFn, distances: Tensor) -> Tensor:
    """A bias of ``q - k`` alone at each of ``distances [n]`` (queries there, one key at 0):
    ``[h, n]``."""
    table = bias_fn(distances, torch.zeros(1, dtype=distances.dtype, device=distances.device))
    return table.reshape(table.shape[-3], len(distances))


def flex_score_mod(q_pos: Tensor, k_pos: Tensor, table: Tensor, lowest: Tensor) -> ScoreMod:
    """The ``score_mod`` adding ``table[h, q_pos - k_pos - lowest]`` (see
    :func:`distance_table`). Scalar code, as FlexAttention's compiler requires; its indexing
    also broadcasts, so tests can evaluate it densely on the CPU, where FlexAttention has no
    backward."""
    pair = position_reader(q_pos, k_pos)
    last = table.shape[-1] - 1

    def score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        qp, kp = pair(b, q_idx, kv_idx)
        return score + table[h, (qp - kp - lowest).clamp(0, last)].to(score.dtype)

    return score_mod


def flex_bias_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_pos: Tensor,
    k_pos: Tensor,
    bias_fn: BiasFn,
    compile: bool = True,
    score_mod: ScoreMod | None = None,
) -> Tensor:
    """Causal attention with a bias added inside FlexAttention's ``score_mod``.

    Compiled, it never materialises a score or bias matrix: the bias is a ``[h, distances]``
    table (with its autograd history, so learned biases get gradients on CUDA), or computed
    per pair by the encoding's own ``score_mod`` (FIRE's, which reads the query's position).

    Args:
        q: Queries ``[b, h, s, d_h]``.
        k: Keys ``[b, h, s, d_h]``.
        v: Values ``[b, h, s, d_h]``.
        q_pos: Integer query positions ``[s]`` or ``[b, s]``.
        k_pos: Integer key positions ``[s]`` or ``[b, s]``.
        bias_fn: A bias of ``q - k`` alone (see :func:`distance_table`).
        compile: Use the compiled fused kernel (``False``: FlexAttention's unfused reference,
            which materialises the scores; for tests).
        score_mod: The encoding's own ``score_mod`` (``None``: ``bias_fn`` tabulated by
            distance, for a bias of ``q - k`` alone).

    Returns:
        ``[b, h, s, d_h]``.
    """
    if score_mod is None:
        table, lowest = distance_table(q_pos, k_pos, bias_fn)
        score_mod = flex_score_mod(q_pos, k_pos, table, lowest)
    return causal_flex(q, k, v, score_mod, compile=compile)


def causal_flex(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    score_mod: ScoreMod | None,
    compile: bool = True,
    scale: float | None = None,
    lse: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Causal FlexAttention (the tile-built :func:`causal_block_mask`), compiled or not.

    Args:
        q: Queries ``[b, h, sq, e]``.
        k: Keys ``[b, h, sk, e]``.
        v: Values ``[b, h, sk, d_v]`` (``d_v`` may differ from ``e``).
        score_mod: Added to every score after ``scale`` (``None``: none).
        compile: The compiled fused kernel (``False``: FlexAttention's unfused reference,
            which materialises the scores; for tests).
        scale: Factor of ``q . k`` (``None``: ``1 / sqrt(e)``).
        lse: Also return each query's log-sum-exp of its scores (natural log, float32; on
            CUDA FlexAttention's backward differentiates it).

    Returns:
        ``out [b, h, sq, d_v]``, or ``(out, lse [b, h, sq])`` with ``lse``.

    Raises:
        NotImplementedError: ``lse`` compiled for a device other than CUDA: Inductor's CPU
            FlexAttention returns none (torch 2.13), and says so only after compiling.
    """
    if lse and compile and q.device.type != "cuda":
        raise NotImplementedError(
            f"FlexAttention compiled for {q.device.type} returns no log-sum-exp in this torch"
        )
    mask = causal_block_mask(q.shape[-2], k.shape[-2], str(q.device))
    attend = _compiled_flex() if compile else flex_attention
    kwargs: dict[str, object] = {"score_mod": score_mod, "block_mask": mask, "scale": scale}
    if not lse:
        return attend(q, k, v, **kwargs)
    if AuxRequest is None:  # pragma: no cover - torch < 2.9
        return attend(q, k, v, return_lse=True, **kwargs)
    out, aux = attend(q, k, v, return_aux=AuxRequest(lse=True), **kwargs)
    return out, aux.lse
