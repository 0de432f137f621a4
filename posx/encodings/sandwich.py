"""Sandwich (Chi et al. 2023, "Dissecting Transformer Length Extrapolation via the Lens of
Receptive Field Analysis"): the inner product of two sinusoidal embeddings as a fixed bias.

    bias_h(i, j) = (sum_{k=1}^{d'/2} cos((i - j) / 10000^(2k/d')) - d'/2) / (8h / H)

for head ``h = 1..H``. The sum is ``d'/2`` at distance 0, so the bias starts at 0 and decays
(roughly logarithmically) with distance; the head divisor ``8h/H`` is ALiBi's slope exponent, as
in the paper's code. No parameters. ``d'`` defaults to the model width.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posx.encodings.base import (
    PositionalEncoding,
    add_head_dim,
    exact_dtype,
    relative_distance,
    values_are_concrete,
)

FLOAT_CHUNK = 16  # frequencies per step when positions are fractional (bounds memory)


class Sandwich(PositionalEncoding):
    """Parameter-free log-like decaying bias built from sinusoids.

    Args:
        n_heads: Number of attention heads ``H``.
        d_model: Model width; the default ``d'``.
        dim: The sinusoid width ``d'`` (even); ``None`` uses ``d_model``.
        base: Sinusoid base (10000 in the paper).
    """

    relative_bias = True  # a function of q - k alone

    def __init__(
        self, n_heads: int, d_model: int, dim: int | None = None, base: float = 10000.0
    ) -> None:
        super().__init__()
        d = int(dim if dim is not None else d_model)
        if d < 2 or d % 2:
            raise ValueError(f"Sandwich dim must be even and >= 2, got {d}")
        self.n_heads, self.dim, self.base = n_heads, d, float(base)
        heads = torch.arange(1, n_heads + 1, dtype=torch.float64)
        self.register_buffer("head_scale", (n_heads / (8 * heads)).float(), persistent=False)
        self.register_buffer("_profile", torch.empty(0), persistent=False)  # by |distance|

    def profile(self, dist: Tensor) -> Tensor:
        """``sum_k cos(dist * w_k) - d'/2`` (before the head divisor), float32, shape of dist.

        Integer distances read a cached table over ``|distance|`` (grown on demand); float
        distances, and calls traced by FlexAttention, evaluate the sum directly.
        """
        if dist.is_floating_point():
            return self._sum_cos(dist.to(exact_dtype(dist.device))).float()
        if not values_are_concrete(dist):
            return self._sum_cos(dist.float())  # traced per (query, key) pair: no table
        need = int(dist.abs().max()) + 1
        if need > self._profile.shape[0] or self._profile.device != dist.device:
            size = max(need, 2 * self._profile.shape[0], 256)
            t = torch.arange(size, dtype=exact_dtype(dist.device), device=dist.device)
            self._profile = self._sum_cos(t).float()  # float64 phases: exact at 1e6
        return self._profile[dist.abs()]

    def frequencies(self, dtype: torch.dtype, device: torch.device) -> Tensor:
        """``w_k = base^(-2k/d')`` for ``k = 1..d'/2``, ``[d'/2]``, formed in ``dtype``."""
        k = torch.arange(1, self.dim // 2 + 1, dtype=dtype, device=device)
        return self.base ** (-2 * k / self.dim)

    def _sum_cos(self, t: Tensor) -> Tensor:
        # Formed in t's dtype (float64 where the device has it): exact phases at large distances.
        freq = self.frequencies(t.dtype, t.device)
        total = torch.zeros_like(t)
        for c0 in range(0, freq.shape[0], FLOAT_CHUNK):
            total = total + torch.cos(t.unsqueeze(-1) * freq[c0 : c0 + FLOAT_CHUNK]).sum(-1)
        return total - self.dim / 2

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        if q_pos.is_floating_point() or k_pos.is_floating_point():
            q_pos, k_pos = (p.to(exact_dtype(p.device)) for p in (q_pos, k_pos))
        dist = relative_distance(q_pos, k_pos)
        return add_head_dim(self.profile(dist).unsqueeze(-1) * self.head_scale)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, dim={self.dim}, base={self.base:g}"
