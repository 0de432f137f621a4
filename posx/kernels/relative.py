"""Relative-distance helpers of the encodings that compute their own scores: a per-distance
table read as ``[query, key]`` by strided views (``relative_shift``, ``relative_shift_keys``,
``distance_block``), or by gathers where positions are not consecutive (``gather_relative``,
``per_query``), and the test that picks between them (``consecutive_positions``)."""

from __future__ import annotations

import torch
from torch import Tensor


def consecutive_positions(q_pos: Tensor, k_pos: Tensor) -> bool:
    """Whether queries and keys are the same positions, each one more than the last (per row).

    Then the distance of pair ``(i, j)`` is ``i - j`` by index, whatever the first position, and
    a block's relative terms can be read off one product by :func:`relative_shift`.
    """
    return torch.equal(q_pos, k_pos) and bool((q_pos.diff(dim=-1) == 1).all())


def increasing_integer_positions(q_pos: Tensor, k_pos: Tensor) -> bool:
    """Whether queries and keys are the same integer positions, strictly increasing per row
    (gaps allowed): then a key ``m`` indices back is at least ``m`` positions back."""
    if q_pos.is_floating_point() or not torch.equal(q_pos, k_pos):
        return False
    return bool((q_pos.diff(dim=-1) > 0).all())


def relative_shift(rel: Tensor, keys: int) -> Tensor:
    """Reads a block's relative scores by distance as a view of a product over distances.

    Transformer-XL's "relative shift", with no padding or copy: for a query block of ``bq``
    queries and ``keys`` keys at consecutive positions (the last key being the last query), the
    scores against every distance the block spans, from the largest (column 0) down to
    ``1 - bq``, are ``rel [.., bq, keys + bq - 1]``; the pair of query ``r`` and key ``c`` lies
    at distance ``keys - bq + r - c``, column ``bq - 1 - r + c``: a strided view of ``rel``.

    Args:
        rel: ``[.., bq, keys + bq - 1]``, distances decreasing along the last dim (its leading
            dims may be in any order; a copy is made only if its rows are not back to back).
        keys: Keys of the block.

    Returns:
        ``[.., bq, keys]`` with ``out[.., r, c] = rel[.., r, bq - 1 - r + c]``.
    """
    if rel.stride(-1) != 1 or rel.stride(-2) != rel.shape[-1]:  # rows must be back to back
        rel = rel.contiguous()
    bq = rel.shape[-2]
    if rel.shape[-1] != keys + bq - 1:
        raise ValueError(f"relative_shift needs {keys + bq - 1} distances, got {rel.shape[-1]}")
    size, stride = (*rel.shape[:-1], keys), (*rel.stride()[:-2], rel.stride(-2) - 1, 1)
    return rel.as_strided(size, stride, rel.storage_offset() + bq - 1)


def relative_shift_keys(rel: Tensor, queries: int) -> Tensor:
    """:func:`relative_shift` for a product taken key-major, distances increasing.

    For ``queries`` queries and a run of ``keys`` keys, each at consecutive positions, the
    scores of every key against every distance their pairs span, from the smallest (query 0,
    last key: column 0) up, are ``rel [.., keys, keys + queries - 1]``; the pair of query ``r``
    and key ``c`` lies at column ``keys - 1 + r - c`` of row ``c``: a strided view of ``rel``,
    already in ``[.., queries, keys]`` order (no transpose or copy).

    Args:
        rel: ``[.., keys, keys + queries - 1]``, distances increasing along the last dim.
        queries: Queries of the block.

    Returns:
        ``[.., queries, keys]`` with ``out[.., r, c] = rel[.., c, keys - 1 + r - c]``.
    """
    rel = rel.contiguous()
    keys = rel.shape[-2]
    width = keys + queries - 1
    if rel.shape[-1] != width:
        raise ValueError(f"relative_shift_keys needs {width} distances, got {rel.shape[-1]}")
    size, stride = (*rel.shape[:-2], queries, keys), (*rel.stride()[:-2], 1, width - 1)
    return rel.as_strided(size, stride, rel.storage_offset() + keys - 1)


def distance_block(table: Tensor, i0: int, i1: int) -> Tensor:
    """A relative bias's block for queries ``[i0, i1)`` and keys ``[0, i1)`` at consecutive
    positions, read from its per-distance table in one pass.

    Args:
        table: ``[h, 2s - 1]``: the bias at distances ``s - 1`` down to ``1 - s`` (``s >= i1``).
        i0: First query (by index).
        i1: One past the last query.

    Returns:
        A new contiguous ``[h, i1 - i0, i1]`` tensor: ``out[:, r, c] = bias(i0 + r - c)``.
    """
    s = (table.shape[-1] + 1) // 2
    # Query i0 + r and key c are at distance i0 + r - c: column s - 1 - i0 - r + c. (A strided
    # view cannot hold that Toeplitz block: its rows step back through the table; a gather by
    # one index shared by the heads measured 2x faster than slicing sliding windows and
    # reversing them, and 4x faster than ALiBi's bias computed per pair.)
    rows = torch.arange(s - 1 - i0, s - 1 - i1, -1, device=table.device).unsqueeze(-1)
    index = rows + torch.arange(i1, device=table.device)  # [i1 - i0, i1]
    h, bq = table.shape[0], i1 - i0
    return torch.gather(table.unsqueeze(1).expand(h, bq, -1), -1, index.expand(h, bq, i1))


def per_query(index: Tensor, like: Tensor) -> Tensor:
    """Broadcasts a ``[sq, sk]`` or ``[b, sq, sk]`` index to ``like``'s ``[b, h, sq, sk]``."""
    if index.dim() == 3:
        index = index.unsqueeze(1)
    return index.expand(like.shape[0], like.shape[1], *index.shape[-2:])


def gather_relative(table: Tensor, index: Tensor) -> Tensor:
    """Picks, for every (query, key) pair, the query's score for that pair's relative slot.

    Args:
        table: Per-query scores for every slot ``[b, h, sq, r]``.
        index: Slot of each pair ``[sq, sk]`` or ``[b, sq, sk]`` (long, in ``[0, r)``).

    Returns:
        ``[b, h, sq, sk]`` with ``out[.., i, j] = table[.., i, index[i, j]]``.
    """
    return torch.gather(table, -1, per_query(index, table))


def integer_distance(distance: Tensor) -> Tensor:
    """Rounds float distances (interpolated positions) to the nearest integer slot."""
    return distance.round().long() if distance.is_floating_point() else distance.long()
