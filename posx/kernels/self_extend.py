"""Self-Extend (Jin et al. 2024, "LLM Maybe LongLM"): a RoPE model reads past its trained context
with no training, by attending at two levels.

- **Neighbour attention**: a key fewer than ``W`` positions before the query is scored at its
  exact relative position ``i - j`` (the model's own rotation).
- **Grouped attention**: a key ``W`` or more positions back is scored with both positions
  divided by the group size ``G`` (floor), the query's shifted by ``W - W // G`` so that the
  grouped distances continue where the neighbour window ends:
  ``gq(i) = i // G + W - W // G``, ``gk(j) = j // G``, relative position ``gq(i) - gk(j)``.

The largest relative position a sequence of ``T`` tokens then uses is about
``W + (T - W) / G``, which is kept within the trained context. The shift is the paper's
(eq. 4 and its reference code, ``self_extend_patch``: ``query // G + W - W // G``; one of the
reference's patches divides ``W / G`` as floats, which agrees when ``G`` divides ``W``).

The merged attention is one softmax over both kinds of scores: a block's logits take the
neighbour score where ``i - j < W`` and the grouped one elsewhere. Keys that are grouped for
every query of a block are grouped scores with no per-pair term, so they go through the fused
far-key kernel of :func:`~posx.kernels.blocked.blocked_attend` at evaluation (memory linear in
the length).

With a KV cache (generation), the queries are the last few positions and the keys every
position so far: :func:`self_extend_attend_cached` scores them directly, a block of queries at a
time (one query per step while decoding), in the same :func:`self_extend_attend`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from posx.kernels.blocked import FarKeys, blocked_attend


def grouped_query_positions(pos: Tensor, group: int, window: int) -> Tensor:
    """Grouped attention's query positions ``pos // G + W - W // G`` (same shape and dtype).

    Args:
        pos: Query positions ``[s]`` or ``[b, s]`` (integer or float).
        group: Group size ``G >= 1``.
        window: Neighbour window ``W >= 1``.
    """
    return torch.div(pos, group, rounding_mode="floor") + (window - window // group)


def grouped_key_positions(pos: Tensor, group: int) -> Tensor:
    """Grouped attention's key positions ``pos // G`` (same shape and dtype).

    Args:
        pos: Key positions ``[s]`` or ``[b, s]``.
        group: Group size ``G >= 1``.
    """
    return torch.div(pos, group, rounding_mode="floor")


def self_extend_distance(q_pos: Tensor, k_pos: Tensor, group: int, window: int) -> Tensor:
    """The relative position Self-Extend scores each query-key pair at.

    Args:
        q_pos: ``[sq]`` or ``[b, sq]``.
        k_pos: ``[sk]`` or ``[b, sk]``.
        group: Group size ``G``.
        window: Neighbour window ``W``.

    Returns:
        ``[sq, sk]`` or ``[b, sq, sk]``: ``i - j`` where ``i - j < W``, else
        ``gq(i) - gk(j)`` (meaningful where the key is visible, ``i >= j``).
    """
    exact = q_pos.unsqueeze(-1) - k_pos.unsqueeze(-2)
    grouped = grouped_query_positions(q_pos, group, window).unsqueeze(-1) - grouped_key_positions(
        k_pos, group
    ).unsqueeze(-2)
    return torch.where(exact < window, exact, grouped)


def self_extend_attend(
    near: tuple[Tensor, Tensor],
    grouped: tuple[Tensor, Tensor],
    v: Tensor,
    positions: tuple[Tensor, Tensor],
    window: int,
    block_size: int,
    mask: Tensor | None = None,
    scale: float | None = None,
) -> Tensor:
    """Causal merged attention: neighbour scores within ``window``, grouped scores beyond.

    Queries and keys of one window (``sq = sk = s``) go through the blocked kernel; fewer
    queries than keys (the last ``sq`` positions against a KV cache's ``sk``) are scored
    directly, ``block_size`` queries at a time.

    Args:
        near: Queries ``[b, h, sq, d]`` and keys ``[b, h, sk, d]`` rotated at their own
            positions.
        grouped: The same queries and keys rotated at the grouped positions
            (:func:`grouped_query_positions`, :func:`grouped_key_positions`).
        v: Values ``[b, h, sk, d_v]``.
        positions: Query positions ``[sq]`` or ``[b, sq]`` and key positions ``[sk]`` or
            ``[b, sk]`` (their own, not grouped).
        window: Neighbour window ``W``.
        block_size: Most queries per block (:func:`~posx.kernels.blocked.blocked_attend`).
        mask: An extra additive float mask (or a bool one, True = visible) broadcasting to
            ``[b, h, sq, sk]``, e.g. padding; ``None``: causal alone. With a mask every key is
            scored explicitly (the fused far-key path takes none).
        scale: Logit scale (default ``1 / sqrt(d)``).

    Returns:
        ``[b, h, sq, d_v]`` in ``v``'s dtype.
    """
    q_near, k_near = near
    q_grp, k_grp = grouped
    q_pos, k_pos = positions
    scale = 1.0 / math.sqrt(q_near.shape[-1]) if scale is None else scale
    k_near_t = k_near.transpose(-1, -2).contiguous()
    k_grp_t = k_grp.transpose(-1, -2).contiguous()
    q_at, k_at = _as_float(q_pos), _as_float(k_pos)
    if mask is not None and mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, device=mask.device).masked_fill_(~mask, float("-inf"))

    def merged(i0: int, i1: int, j0: int, j1: int) -> tuple[Tensor, Tensor]:
        """Queries ``[i0, i1)`` against keys ``[j0, j1)``: the merged logits (float32,
        scaled, with the mask) and the distances ``[(b, 1,) bq, bk]``."""
        dist = q_at[..., i0:i1].unsqueeze(-1) - k_at[..., j0:j1].unsqueeze(-2)
        if dist.dim() == 3:  # [b, sq, sk] -> [b, 1, sq, sk]
            dist = dist.unsqueeze(1)
        near_s = q_near[..., i0:i1, :] @ k_near_t[..., j0:j1]
        grp_s = q_grp[..., i0:i1, :] @ k_grp_t[..., j0:j1]
        logits = torch.where(dist < window, near_s, grp_s).float().mul_(scale)
        if mask is not None:
            logits = logits + mask[..., i0:i1, j0:j1].float()
        return logits, dist

    sq, sk = q_near.shape[-2], k_near.shape[-2]
    if sq != sk:  # a KV cache: each block of queries against every key so far
        outs = []
        for i0 in range(0, sq, block_size):
            logits, dist = merged(i0, min(i0 + block_size, sq), 0, sk)
            logits = logits.masked_fill(dist < 0, float("-inf"))  # keys after the query
            outs.append((logits.softmax(-1) @ v.float()).to(v.dtype))
        return torch.cat(outs, dim=-2)

    def scores(i0: int, i1: int, j0: int) -> tuple[Tensor, None]:
        return merged(i0, i1, j0, i1)[0], None

    def far_keys() -> FarKeys:  # i - j >= W: the grouped scores alone
        return FarKeys(distance=window, q=q_grp, k=k_grp, scale=scale, q_pos=q_pos, k_pos=k_pos)

    return blocked_attend(v, scores, block_size, far=None if mask is not None else far_keys)


def _as_float(pos: Tensor) -> Tensor:
    return pos if pos.is_floating_point() else pos.to(torch.float32)
