"""T5 relative position bias (Raffel et al. 2020): a learned scalar per head and distance bucket.

Distances below ``num_buckets / 2`` get a bucket each; longer ones share log-spaced buckets up to
``max_distance``, beyond which everything falls in the last bucket. This module is the causal
(decoder) variant: keys after the query do not occur, so all buckets measure looking back.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from posx.encodings.base import PositionalEncoding, add_head_dim, relative_distance


def t5_bucket(distance: Tensor, num_buckets: int = 32, max_distance: int = 128) -> Tensor:
    """Maps backward distance ``i - j >= 0`` to a bucket in ``[0, num_buckets)``.

    Args:
        distance: Distances (negative values, i.e. future keys, map to bucket 0).
        num_buckets: Number of buckets.
        max_distance: Distance at which the log-spaced buckets end.

    Returns:
        Long tensor of buckets with the shape of ``distance``.
    """
    n = (
        distance.floor().long().clamp(min=0)
        if distance.is_floating_point()
        else distance.clamp(min=0)
    )
    max_exact = num_buckets // 2
    scaled = torch.log(n.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    far = max_exact + (scaled * (num_buckets - max_exact)).long()
    far = far.clamp(max=num_buckets - 1)
    return torch.where(n < max_exact, n, far)


class T5Bias(PositionalEncoding):
    """Learned bucketed relative bias, one table shared by all layers (as in T5).

    Args:
        n_heads: Number of attention heads.
        num_buckets: Number of distance buckets.
        max_distance: Distance where the last bucket starts to absorb everything.
    """

    relative_bias = True  # a function of q - k alone

    def __init__(self, n_heads: int, num_buckets: int = 32, max_distance: int = 128) -> None:
        super().__init__()
        if num_buckets < 2 or max_distance <= num_buckets // 2:
            raise ValueError(
                f"T5 bias needs num_buckets >= 2 and max_distance > num_buckets/2, "
                f"got {num_buckets} and {max_distance}"
            )
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.table = nn.Embedding(num_buckets, n_heads)
        nn.init.normal_(self.table.weight, std=0.02)

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        buckets = t5_bucket(relative_distance(q_pos, k_pos), self.num_buckets, self.max_distance)
        return add_head_dim(self.table(buckets))
