"""KERPLE: kernelized relative positional biases (Chi et al. 2022).

Two conditionally positive definite kernels, each with two learned positive parameters per
head (and per layer, as in the paper's implementation):

- log:   ``-r1 * log(1 + r2 * |i - j|)``,  ``r1, r2 > 0``;
- power: ``-r1 * |i - j|^r2``,             ``r1 > 0``, ``0 < r2 <= 2``.

The paper clamps the raw parameters to ``>= 0.01`` after each step; here the constraints hold by
construction instead (``r = 0.01 + softplus(rho)``; ``r2 = 0.01 + 1.99 sigmoid(rho)`` for the
power), so every value the optimiser can reach is valid and gradients never vanish at the
boundary. Initial values follow the paper's code: log ``r1 ~ U(0, 2)``, ``r2 ~ U(0, 1)``; power
``r1 ~ U(0, 1)``, ``r2 ~ U(0, 2)`` (kept inside the constraints).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posx.encodings.base import add_head_dim, as_float, relative_distance
from posx.encodings.per_layer import PerLayer

EPS = 0.01  # the paper's lower bound on every parameter
POWER_MAX = 2.0  # the power kernel is conditionally positive definite for r2 in (0, 2]


def _softplus_inverse(x: Tensor) -> Tensor:
    return x + torch.log(-torch.expm1(-x))  # log(exp(x) - 1), stable for large x


def _positive_raw(value: Tensor) -> Tensor:
    """``rho`` with ``EPS + softplus(rho) == value`` (values at or below EPS are nudged up)."""
    return _softplus_inverse((value - EPS).clamp(min=1e-4))


def _bounded_raw(value: Tensor) -> Tensor:
    """``rho`` with ``EPS + (POWER_MAX - EPS) sigmoid(rho) == value`` (kept strictly inside)."""
    unit = ((value - EPS) / (POWER_MAX - EPS)).clamp(1e-4, 1 - 1e-4)
    return torch.logit(unit)


class _Kerple(PerLayer):
    """Shared parts: two ``[n_sets, h]`` raw parameters and the ``|i - j|`` distance."""

    relative_bias = True  # a function of q - k alone

    def __init__(
        self, n_heads: int, n_layers: int, per_layer: bool, r1_init: Tensor, r2_raw: Tensor
    ) -> None:
        super().__init__(n_layers, per_layer)
        self.n_heads = n_heads
        self.r1_raw = nn.Parameter(_positive_raw(r1_init))
        self.r2_raw = nn.Parameter(r2_raw)

    def r1(self, layer: int | None = None) -> Tensor:
        """``r1 > 0`` of ``layer`` (``None``: the only set), ``[h]``."""
        return EPS + F.softplus(self.r1_raw[self.set_index(layer, "r1")])

    def r2(self, layer: int | None = None) -> Tensor:
        raise NotImplementedError

    def kernel(self, dist: Tensor, r1: Tensor, r2: Tensor) -> Tensor:
        raise NotImplementedError

    def layer_bias(self, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor:
        # |i - j|: future keys get a finite value here and are masked by attention anyway.
        dist = relative_distance(as_float(q_pos), as_float(k_pos)).abs().unsqueeze(-1)
        return add_head_dim(self.kernel(dist, self.r1(layer), self.r2(layer)))


class KerpleLog(_Kerple):
    """``-r1 * log(1 + r2 |i - j|)`` per head.

    Args:
        n_heads: Number of attention heads.
        n_layers: Number of layers.
        per_layer: One parameter pair per layer and head (the paper's setting).
    """

    def __init__(self, n_heads: int, n_layers: int = 1, per_layer: bool = True) -> None:
        n = n_layers if per_layer else 1
        r1 = torch.rand(n, n_heads) * 2.0
        r2 = torch.rand(n, n_heads) * 1.0
        super().__init__(n_heads, n_layers, per_layer, r1, _positive_raw(r2))

    def r2(self, layer: int | None = None) -> Tensor:
        """``r2 > 0`` of ``layer`` (``None``: the only set), ``[h]``."""
        return EPS + F.softplus(self.r2_raw[self.set_index(layer, "r2")])

    def kernel(self, dist: Tensor, r1: Tensor, r2: Tensor) -> Tensor:
        return -r1 * torch.log1p(r2 * dist)


class KerplePower(_Kerple):
    """``-r1 * |i - j|^r2`` per head with ``0 < r2 <= 2``.

    Args:
        n_heads: Number of attention heads.
        n_layers: Number of layers.
        per_layer: One parameter pair per layer and head (the paper's setting).
    """

    def __init__(self, n_heads: int, n_layers: int = 1, per_layer: bool = True) -> None:
        n = n_layers if per_layer else 1
        r1 = torch.rand(n, n_heads) * 1.0
        r2 = torch.rand(n, n_heads) * 2.0
        super().__init__(n_heads, n_layers, per_layer, r1, _bounded_raw(r2))

    def r2(self, layer: int | None = None) -> Tensor:
        """``r2`` in ``(0, 2]`` of ``layer`` (``None``: the only set), ``[h]``."""
        return EPS + (POWER_MAX - EPS) * torch.sigmoid(self.r2_raw[self.set_index(layer, "r2")])

    def kernel(self, dist: Tensor, r1: Tensor, r2: Tensor) -> Tensor:
        return -r1 * dist.pow(r2)
