"""ALiBi with learned slopes: ``-m_h (i - j)`` where ``log m_h`` is a parameter initialised at
ALiBi's geometric slopes (Press et al. 2022 keep them fixed; learning them is a common ablation,
e.g. in KERPLE, Chi et al. 2022). The log keeps every slope positive, so the bias always
decreases with distance."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from posx.encodings.alibi import alibi_slopes
from posx.encodings.base import add_head_dim, as_float, relative_distance
from posx.encodings.per_layer import PerLayer


class ALiBiLearned(PerLayer):
    """Linear distance bias with one learned positive slope per head.

    Args:
        n_heads: Number of attention heads.
        n_layers: Number of layers (used when ``per_layer``).
        per_layer: Learn a slope set per layer (default: one shared set, like ALiBi).
    """

    relative_bias = True  # a function of q - k alone

    def __init__(self, n_heads: int, n_layers: int = 1, per_layer: bool = False) -> None:
        super().__init__(n_layers, per_layer)
        self.n_heads = n_heads
        init = torch.tensor([math.log(m) for m in alibi_slopes(n_heads)])
        self.log_slopes = nn.Parameter(init.repeat(self.n_sets, 1))  # [n_sets, h]

    def slopes(self, layer: int | None = None) -> Tensor:
        """Current slopes ``[h]`` of ``layer`` (``None``: the only set)."""
        return self.log_slopes[self.set_index(layer, "slopes")].exp()

    def layer_bias(self, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor:
        dist = relative_distance(as_float(q_pos), as_float(k_pos))  # [(b,) sq, sk]
        return add_head_dim(-dist.unsqueeze(-1) * self.slopes(layer))
