"""Dynamic position bias: an MLP from (log) relative distance to one bias per head.

Continuous position bias from Swin Transformer V2 (Liu et al. 2022) in the causal-LM form of
``x-transformers``' ``DynamicPositionBias`` (Wang): ``depth`` SiLU layers of width ``width`` on
``log(1 + (i - j))`` (or the raw distance), then a linear map to the heads. Integer positions
evaluate the MLP once per distinct distance and gather, so the cost is O(distances), not
O(sq x sk).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posx.encodings.base import (
    PositionalEncoding,
    add_head_dim,
    relative_distance,
    values_are_concrete,
)


class DynamicBias(PositionalEncoding):
    """MLP over relative distance, shared by all layers.

    Args:
        n_heads: Number of attention heads (MLP outputs).
        width: Hidden width.
        depth: Number of hidden layers (>= 1).
        log_distance: Feed ``log(1 + d)`` rather than ``d`` (better beyond the trained range).
    """

    relative_bias = True  # a function of q - k alone

    def __init__(
        self, n_heads: int, width: int = 64, depth: int = 2, log_distance: bool = True
    ) -> None:
        super().__init__()
        if depth < 1 or width < 1:
            raise ValueError(f"dynamic bias needs depth >= 1 and width >= 1, got {depth}, {width}")
        self.n_heads, self.log_distance = n_heads, log_distance
        layers: list[nn.Module] = [nn.Linear(1, width), nn.SiLU()]
        for _ in range(depth - 1):
            layers += [nn.Linear(width, width), nn.SiLU()]
        layers.append(nn.Linear(width, n_heads))
        self.mlp = nn.Sequential(*layers)

    def decayed_parameter_names(self) -> set[str]:
        # Swin Transformer V2's reference code exempts this MLP ("cpb_mlp") from weight decay.
        return set()

    def feature(self, dist: Tensor) -> Tensor:
        """MLP input for backward distances ``dist >= 0`` (float32)."""
        d = dist.float()
        return torch.log1p(d) if self.log_distance else d

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        # float32 under autocast too: a bf16 MLP rounds at every layer, and the bias is a
        # function of positions alone (no activations), cheap to keep exact.
        with torch.autocast(q_pos.device.type, enabled=False):
            return self._bias(q_pos, k_pos)

    def _bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        # Future keys (negative distance) are masked by attention; clamp them onto distance 0.
        floats = q_pos.is_floating_point() or k_pos.is_floating_point()
        if floats or not values_are_concrete(q_pos):  # fractional, or traced per pair
            dist = relative_distance(q_pos.float(), k_pos.float()).clamp(min=0)
            return add_head_dim(self.mlp(self.feature(dist).unsqueeze(-1)))
        dist = relative_distance(q_pos, k_pos).clamp(min=0)
        lo, hi = int(dist.min()), int(dist.max())
        values = torch.arange(lo, hi + 1, device=dist.device)
        table = self.mlp(self.feature(values).unsqueeze(-1))  # [distinct, h]
        return add_head_dim(table[dist - lo])
