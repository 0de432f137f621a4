"""DeBERTa's relative-position index: the table row of each distance, with plain clipping or
DeBERTa-v2's log buckets, and the distance from which every row is the table's last.

Kept apart from :mod:`posx.encodings.deberta`'s attention: these are the paper's formulas,
checked against its reference code in ``tests/unit/encodings/test_deberta.py``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from posx.kernels.relative import integer_distance


def log_bucket_position(distance: Tensor, buckets: int, max_position: int) -> Tensor:
    """DeBERTa-v2's ``make_log_bucket_position``: exact below ``buckets/2``, log-spaced beyond.

    Args:
        distance: Signed integer distances ``[...]``.
        buckets: Bucket count (even, >= 4).
        max_position: Distance mapped to the last bucket, ``buckets/2 + ...`` (> ``buckets/2``).

    Returns:
        Long signed bucket ids with the shape of ``distance``.
    """
    sign = torch.sign(distance)
    mid = buckets // 2
    near = (distance < mid) & (distance > -mid)
    abs_pos = torch.where(near, torch.full_like(distance, mid - 1), distance.abs()).double()
    log_pos = torch.ceil(torch.log(abs_pos / mid) / math.log((max_position - 1) / mid) * (mid - 1))
    log_pos = (log_pos + mid).long()
    return torch.where(abs_pos <= mid, distance, log_pos * sign)


def deberta_index(
    q_pos: Tensor, k_pos: Tensor, max_relative_positions: int, position_buckets: int = 0
) -> Tensor:
    """The paper's ``delta(i, j)`` for every pair: table row of the distance ``i - j``.

    Args:
        q_pos: Query positions ``[sq]`` or ``[b, sq]``.
        k_pos: Key positions ``[sk]`` or ``[b, sk]``.
        max_relative_positions: ``k``.
        position_buckets: ``0`` for plain clipping, else the log-bucket count.

    Returns:
        Long ``[sq, sk]`` or ``[b, sq, sk]`` in ``[0, 2 * span)``, ``span`` the table half-size.
    """
    distance = integer_distance(q_pos.unsqueeze(-1) - k_pos.unsqueeze(-2))  # i - j
    span = max_relative_positions
    if position_buckets > 0:
        distance = log_bucket_position(distance, position_buckets, max_relative_positions)
        span = position_buckets
    return (distance + span).clamp(0, 2 * span - 1)


def saturation_distance(max_relative_positions: int, position_buckets: int = 0) -> int:
    """Smallest ``d`` from which ``delta(i, j)`` is the table's last row and ``delta(j, i)`` its
    first for every ``i - j >= d`` (both are monotone in the distance).

    Args:
        max_relative_positions: ``k``.
        position_buckets: ``0`` for plain clipping, else the log-bucket count.
    """
    # A number of the config, not of the model: on the CPU, also while the model is built on
    # the ``meta`` device (the memory preflight), where nonzero() has no value to return.
    distance = torch.arange(0, 4 * max_relative_positions + 4, device="cpu")
    zero = torch.zeros(1, dtype=torch.long, device="cpu")
    ahead = deberta_index(distance, zero, max_relative_positions, position_buckets).squeeze(-1)
    behind = deberta_index(zero, distance, max_relative_positions, position_buckets).squeeze(0)
    last = 2 * (position_buckets or max_relative_positions) - 1
    unsaturated = ((ahead != last) | (behind != 0)).nonzero()
    return int(unsaturated.max()) + 1
