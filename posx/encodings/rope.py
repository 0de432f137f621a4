"""Rotary position embedding (Su et al. 2021, RoFormer).

Pairs of query/key dimensions are rotated by ``pos * base^(-2i/r)`` so that the score
``q_m . k_n`` depends only on ``m - n``. Dimensions are paired half-and-half (GPT-NeoX layout):
``(x_i, x_{i + r/2})``, which equals the paper's adjacent pairing up to a fixed permutation of
the learned projections. With ``rotary_fraction < 1`` only the first ``r`` dimensions of each
head rotate (GPT-J/NeoX partial rotary); the rest pass through.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posx.encodings.base import PositionalEncoding


class RoPE(PositionalEncoding):
    """Rotary encoding with a cos/sin table that grows on demand.

    Args:
        head_dim: Per-head width ``d_h``.
        base: Frequency base (10000 in the paper).
        rotary_fraction: Fraction of ``d_h`` that rotates; the rotated width must be even.
    """

    def __init__(self, head_dim: int, base: float = 10000.0, rotary_fraction: float = 1.0) -> None:
        super().__init__()
        if not 0.0 < rotary_fraction <= 1.0:
            raise ValueError(f"rotary_fraction must be in (0, 1], got {rotary_fraction}")
        rot = round(head_dim * rotary_fraction)
        if rot % 2 or rot == 0:
            raise ValueError(
                f"rotary dimension must be even and positive: head_dim {head_dim} x "
                f"rotary_fraction {rotary_fraction} = {rot}"
            )
        self.head_dim, self.rot_dim, self.base = head_dim, rot, base
        inv_freq = base ** (-torch.arange(0, rot, 2, dtype=torch.float32) / rot)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("_cos", torch.empty(0, rot // 2), persistent=False)
        self.register_buffer("_sin", torch.empty(0, rot // 2), persistent=False)

    def _table(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin ``[..., r/2]`` at ``pos``; integer positions index a cached table."""
        if pos.is_floating_point():
            angles = pos.unsqueeze(-1) * self.inv_freq
            return angles.cos(), angles.sin()
        need = int(pos.max()) + 1
        if need > self._cos.shape[0]:
            size = max(need, 2 * self._cos.shape[0], 256)
            angles = (
                torch.arange(size, device=self.inv_freq.device).float()[:, None] * self.inv_freq
            )
            self._cos, self._sin = angles.cos(), angles.sin()
        return self._cos[pos], self._sin[pos]

    def _turn(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        r, half = self.rot_dim, self.rot_dim // 2
        x1, x2, rest = x[..., :half], x[..., half:r], x[..., r:]
        out = (x1 * cos - x2 * sin, x1 * sin + x2 * cos, rest)
        return torch.cat(out, dim=-1)

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        q_cs = [t.unsqueeze(-3).to(q.dtype) for t in self._table(q_pos)]  # [(b,) 1, s, r/2]
        k_cs = q_cs if k_pos is q_pos else [t.unsqueeze(-3).to(k.dtype) for t in self._table(k_pos)]
        return self._turn(q, *q_cs), self._turn(k, *k_cs)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, rot_dim={self.rot_dim}, base={self.base}"
