"""Fixed sinusoidal absolute positions (Vaswani et al. 2017, "Attention Is All You Need")."""

from __future__ import annotations

import torch
from torch import Tensor

from posx.encodings.base import PositionalEncoding, exact_dtype
from posx.kernels.memo import PositionMemo


def sinusoidal_table(pos: Tensor, dim: int, base: float = 10000.0) -> Tensor:
    """PE(p, 2i) = sin(p / base^(2i/d)), PE(p, 2i+1) = cos(p / base^(2i/d)).

    Args:
        pos: Positions ``[...]`` (float allowed).
        dim: Embedding width ``d`` (even).
        base: Wavelength base.

    Returns:
        ``[..., d]`` float32, sine and cosine interleaved as in the paper.
    """
    # Phases in float64 (where the device has it), like RoPE's and Sandwich's tables: in float32
    # the angle at position 1e6 is off by up to ulp(1e6) ~ 0.06 rad, and sin/cos by ~1e-2.
    dtype = exact_dtype(pos.device)
    half = torch.arange(dim // 2, device=pos.device, dtype=dtype)
    inv_freq = base ** (-2.0 * half / dim)
    angles = pos.to(dtype).unsqueeze(-1) * inv_freq  # [..., d/2]
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2).float()


class Sinusoidal(PositionalEncoding):
    """Adds the sinusoidal table to token embeddings; defined at every (float) position.

    Args:
        d_model: Model width (even).
        base: Wavelength base (10000 in the paper).
        scale: Multiplies the table; ``None`` means ``d_model ** -0.5``. The paper adds the
            table at unit amplitude to embeddings scaled by ``sqrt(d_model)``; with GPT-style
            small embedding init (std 0.02) the same balance needs the table scaled down.
    """

    def __init__(self, d_model: int, base: float = 10000.0, scale: float | None = None) -> None:
        super().__init__()
        if d_model % 2:
            raise ValueError(f"sinusoidal encoding needs an even d_model, got {d_model}")
        self.d_model = d_model
        self.base = base
        self.scale = d_model**-0.5 if scale is None else scale
        self._memo = PositionMemo()

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        def table() -> Tensor:
            return self.scale * sinusoidal_table(pos, self.d_model, self.base).to(x.dtype)

        # The table is a function of the positions alone: built once per position set.
        return x + self._memo.get(x.dtype, (pos,), table)
