"""xPos: RoPE with an exponential decay (Sun et al. 2022, "A Length-Extrapolatable Transformer").

On top of the rotation, pair ``k`` of a query at position ``n`` is scaled by ``zeta_k^(n/gamma)``
and of a key at position ``m`` by ``zeta_k^(-m/gamma)``, with
``zeta_k = (2k + 0.4 d) / (1.4 d)`` (``d`` the rotary width, ``k < d/2``) and ``gamma = 512``.
The score then carries ``zeta_k^((n - m)/gamma) <= 1`` for ``n >= m``: a decay that depends only
on the offset. Positions are centred on their mean before the powers are taken (the paper's
implementation does the same); the product is unchanged and the factors stay representable.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posx.encodings.base import as_float
from posx.encodings.rope import RoPE

#: Largest ``|exponent|`` of a scale factor: e^80 ~ 5.5e34 leaves headroom below float32's 3.4e38.
MAX_LOG_SCALE = 80.0


class XPos(RoPE):
    """Rotary encoding with xPos's per-dimension exponential decay.

    Args:
        head_dim: Per-head width ``d_h``.
        base: Rotation frequency base.
        rotary_fraction: Fraction of ``d_h`` that rotates (and decays); the rest passes through.
        gamma: Decay scale ``gamma`` (512 in the paper).
    """

    def __init__(
        self,
        head_dim: int,
        base: float = 10000.0,
        rotary_fraction: float = 1.0,
        gamma: float = 512.0,
    ) -> None:
        super().__init__(head_dim, base, rotary_fraction)
        if gamma <= 0:
            raise ValueError(f"xPos gamma must be positive, got {gamma}")
        self.gamma = float(gamma)
        d = self.rot_dim
        # On the CPU even when the model is built on ``meta`` (the memory preflight): the length
        # limit is a number of the config, read without the buffer's data.
        zeta = (torch.arange(0, d, 2, dtype=torch.float64, device="cpu") + 0.4 * d) / (1.4 * d)
        log_zeta = zeta.log().float()
        self.register_buffer("log_zeta", log_zeta, persistent=False)  # [r/2], < 0
        self._max_length = int(2 * self.gamma * MAX_LOG_SCALE / -float(log_zeta.min()))

    def decay(self, pos: Tensor, center: Tensor) -> Tensor:
        """``zeta^((pos - center)/gamma)`` ``[..., s, r/2]`` (float32)."""
        return ((as_float(pos).float() - center).unsqueeze(-1) / self.gamma * self.log_zeta).exp()

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        # One centre per row, shared by q and k, so q_n . k_m keeps zeta^((n - m)/gamma) exactly.
        center = as_float(k_pos).float().mean(dim=-1, keepdim=True)  # [(b,) 1]
        q_cos, q_sin = self.cos_sin(q_pos)
        k_cos, k_sin = self.cos_sin(k_pos)
        up, down = self.decay(q_pos, center), 1.0 / self.decay(k_pos, center)
        q_cs = [(t * up).unsqueeze(-3) for t in (q_cos, q_sin)]  # [(b,) 1, s, r/2]
        k_cs = [(t * down).unsqueeze(-3) for t in (k_cos, k_sin)]
        return self.turn(q, *q_cs), self.turn(k, *k_cs)

    def max_length(self) -> int:
        """Longest sequence whose centred scale factors stay below ``e^MAX_LOG_SCALE``."""
        return self._max_length

    def unsupported_reason(self, length: int) -> str | None:
        limit = self.max_length()
        if length > limit:
            return (
                f"xPos scale zeta^(n/{self.gamma:g}) overflows float32 beyond {limit} tokens "
                f"(asked for {length}); raise gamma"
            )
        return super().unsupported_reason(length)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, gamma={self.gamma:g}, max_length={self.max_length()}"
