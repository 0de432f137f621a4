"""Complex-order word embeddings (Wang et al. 2020, "Encoding word order in complex embeddings").

Word ``w`` at position ``pos`` is embedded, per complex dimension ``m``, as

    f(w, pos)_m = r_{w,m} * exp(i (omega_{w,m} * pos + theta_{w,m}))

with amplitude ``r``, frequency ``omega`` and initial phase ``theta`` learned per word and
dimension. The network is real, so the ``d/2`` complex dimensions are laid out as
``[Re f, Im f] = [r cos(phi), r sin(phi)]`` (``d`` reals) and *replace* the token embedding.
Moving a word by ``n`` positions rotates each of its complex dimensions by ``omega * n``, so the
embedding is defined at every (float) position.

Parametrisation (posx): the ``embed`` hook receives the token embedding ``x_w`` (a function of
the word id alone), not the id, so the per-word quantities are per-word functions of it:
``r = x_w A``, ``theta = x̂_w B``, ``omega = omega_0 + x̂_w C`` with ``x̂ = x / rms(x)``
(phases need O(1) values whatever the embedding scale). ``omega_0`` starts at the sinusoidal
frequencies ``base^(-2m/d)`` and ``C`` at zero, so training starts from word-independent
sinusoid-like frequencies and learns per-word ones. With a learned ``x_w`` per word this spans
the paper's per-word tables.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posx.encodings.base import PositionalEncoding, as_float


def complex_order_embedding(r: Tensor, omega: Tensor, theta: Tensor, pos: Tensor) -> Tensor:
    """``[r cos(omega pos + theta), r sin(omega pos + theta)]``.

    Args:
        r: Amplitudes ``[b, s, d/2]``.
        omega: Frequencies ``[b, s, d/2]``.
        theta: Initial phases ``[b, s, d/2]``.
        pos: Positions ``[s]`` or ``[b, s]`` (float allowed).

    Returns:
        ``[b, s, d]``: real parts then imaginary parts.
    """
    phase = omega * as_float(pos).unsqueeze(-1) + theta
    return torch.cat((r * phase.cos(), r * phase.sin()), dim=-1)


class ComplexOrder(PositionalEncoding):
    """Replaces token embeddings by complex-order embeddings (see the module docstring).

    Args:
        d_model: Model width (even; from the model).
        base: Wavelength base for the initial frequencies ``omega_0``.
    """

    def __init__(self, d_model: int, base: float = 10000.0) -> None:
        super().__init__()
        if d_model % 2:
            raise ValueError(f"complex_order needs an even d_model, got {d_model}")
        half = d_model // 2
        self.amplitude = nn.Linear(d_model, half, bias=False)  # r = x A
        self.phase = nn.Linear(d_model, half, bias=False)  # theta = x̂ B
        self.frequency = nn.Linear(d_model, half, bias=True)  # omega = omega_0 + x̂ C
        nn.init.normal_(self.amplitude.weight, std=d_model**-0.5)  # keeps |r| ~ |x|
        nn.init.normal_(self.phase.weight, std=d_model**-0.5)  # phases ~ O(1)
        nn.init.zeros_(self.frequency.weight)
        with torch.no_grad():
            self.frequency.bias.copy_(base ** (-2.0 * torch.arange(half) / d_model))

    def word_parameters(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(r, omega, theta)`` ``[b, s, d/2]`` each, from token embeddings ``x [b, s, d]``;
        ``omega`` and ``theta`` in float32 (see :meth:`embed`)."""
        x_hat = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-12)
        # Autocast would run these in bf16 (8 bits of mantissa): at position 1000 a frequency
        # rounded by 0.4% is off by radians. The phases need float32 from the start.
        with torch.autocast(x.device.type, enabled=False):
            omega, theta = self.frequency(x_hat), self.phase(x_hat)
        return self.amplitude(x), omega, theta

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        r, omega, theta = self.word_parameters(x)
        # Phases in float32: omega * pos reaches thousands of radians at long lengths.
        emb = complex_order_embedding(r.float(), omega.float(), theta.float(), pos)
        return emb.to(x.dtype)
