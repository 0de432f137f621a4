"""FLOATER: positions from a continuous dynamical system (Liu et al. 2020).

The position embedding is the solution of a neural ODE along the position axis,
``dp/dt = h(t, p(t); theta)``, ``p(0) = p_0``, read at each (integer or float) position ``t``
and added to the token embeddings. Integration is a fixed-step classical Runge-Kutta (RK4) with
``steps_per_position`` steps per unit of position; no ODE library is needed.

Parametrisation: ``h(t, p) = s'(t) + MLP(p)`` where ``s(t)`` is the sinusoidal table
(Vaswani et al.) and ``s'`` its time derivative. With ``init="sinusoidal"`` the MLP's last
layer starts at zero and ``p_0 = s(0)``, so at initialisation FLOATER *is* the sinusoidal
encoding (the paper's warm start) and training learns a correction; ``init="random"`` drops
``s'`` and starts ``p_0`` and the MLP at random (FLOATER from scratch). This module injects
positions at the input only; the paper's per-layer injection is not modelled.

Cost: the ODE is sequential in position, so building the table up to position ``n`` takes
``4 * steps_per_position * n`` small MLP calls per forward (the paper's noted overhead). In
inference the table is cached and grown on demand until a parameter changes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from posx.encodings.base import PositionalEncoding
from posx.encodings.sinusoidal import sinusoidal_table

Dynamics = Callable[[Tensor, Tensor], Tensor]


def rk4_step(f: Dynamics, t: Tensor, y: Tensor, h: Tensor) -> Tensor:
    """One classical Runge-Kutta step ``y(t) -> y(t + h)`` (``t``, ``h`` broadcast with ``y``)."""
    k1 = f(t, y)
    k2 = f(t + h / 2, y + h / 2 * k1)
    k3 = f(t + h / 2, y + h / 2 * k2)
    k4 = f(t + h, y + h * k3)
    return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)


def odeint_rk4(f: Dynamics, y0: Tensor, n: int, substeps: int = 1) -> Tensor:
    """Solves ``dy/dt = f(t, y)``, ``y(0) = y0`` at ``t = 0, 1, ..., n - 1``.

    Args:
        f: ``(t [1], y [...]) -> dy/dt [...]``.
        y0: Initial state ``[...]``.
        n: Number of integer times returned (>= 1).
        substeps: RK4 steps per unit time (error per unit ~ ``substeps^-4``).

    Returns:
        ``[n, ...]`` states.
    """
    h = torch.full((1,), 1.0 / substeps, device=y0.device, dtype=y0.dtype)
    states, y = [y0], y0
    for i in range(n - 1):
        for m in range(substeps):
            t = torch.full((1,), i + m / substeps, device=y0.device, dtype=y0.dtype)
            y = rk4_step(f, t, y, h)
        states.append(y)
    return torch.stack(states)


class Floater(PositionalEncoding):
    """Neural-ODE position embeddings added to token embeddings.

    Args:
        d_model: Model width (even; from the model).
        hidden: MLP hidden width (``None``: ``d_model``).
        steps_per_position: RK4 steps per unit of position.
        init: ``"sinusoidal"`` (start as the sinusoidal encoding) or ``"random"``.
        base: Sinusoid wavelength base.
        scale: Multiplies the embedding; ``None`` means ``d_model ** -0.5`` (as posx's
            sinusoidal encoding, to balance small token embeddings).
    """

    def __init__(
        self,
        d_model: int,
        hidden: int | None = None,
        steps_per_position: int = 1,
        init: str = "sinusoidal",
        base: float = 10000.0,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        if d_model % 2:
            raise ValueError(f"floater needs an even d_model, got {d_model}")
        if init not in ("sinusoidal", "random"):
            raise ValueError(f"floater init must be 'sinusoidal' or 'random', got {init!r}")
        if steps_per_position < 1:
            raise ValueError(f"floater steps_per_position must be >= 1, got {steps_per_position}")
        self.d_model, self.base, self.init = d_model, base, init
        self.steps_per_position = steps_per_position
        self.scale = d_model**-0.5 if scale is None else scale
        hidden = d_model if hidden is None else hidden
        self.net = nn.Sequential(nn.Linear(d_model, hidden), nn.Tanh(), nn.Linear(hidden, d_model))
        nn.init.normal_(self.net[0].weight, std=d_model**-0.5)
        nn.init.zeros_(self.net[0].bias)
        nn.init.zeros_(self.net[2].bias)
        if init == "sinusoidal":
            nn.init.zeros_(self.net[2].weight)
            p0 = sinusoidal_table(torch.zeros(()), d_model, base)
        else:
            nn.init.normal_(self.net[2].weight, std=hidden**-0.5)
            p0 = torch.randn(d_model)
        self.p0 = nn.Parameter(p0)
        self._cache: tuple[tuple, Tensor] | None = None

    def dynamics(self, t: Tensor, p: Tensor) -> Tensor:
        """``h(t, p) = s'(t) + MLP(p)``; ``t [..., 1]`` broadcasts with ``p [..., d]``."""
        out = self.net(p)
        if self.init == "sinusoidal":
            half = torch.arange(self.d_model // 2, device=p.device, dtype=p.dtype)
            w = self.base ** (-2.0 * half / self.d_model)
            angles = t * w  # t [..., 1] * w [d/2]
            ds = torch.stack((w * angles.cos(), -w * angles.sin()), dim=-1).flatten(-2)
            out = out + ds
        return out

    def table(self, n: int) -> Tensor:
        """``p(t)`` at ``t = 0..n-1``: ``[n, d]`` float32 (cached while parameters are unchanged
        and gradients are off)."""
        key = (self.p0.device, tuple(p._version for p in self.parameters()))
        if not torch.is_grad_enabled() and self._cache is not None:
            cached_key, cached = self._cache
            if cached_key == key and cached.shape[0] >= n:
                return cached[:n]
        with torch.autocast(self.p0.device.type, enabled=False):  # an ODE wants full precision
            states = odeint_rk4(self.dynamics, self.p0.float(), n, self.steps_per_position)
        if not torch.is_grad_enabled():
            self._cache = (key, states)
        return states

    def positions(self, pos: Tensor) -> Tensor:
        """FLOATER embedding at ``pos [s]`` or ``[b, s]`` (float allowed): ``[.., s, d]``."""
        if pos.numel() and float(pos.min()) < 0:
            raise ValueError(f"floater positions must be >= 0, got {float(pos.min())}")
        top = int(pos.max()) + 1 if pos.numel() else 1
        states = self.table(top)
        if not pos.is_floating_point():
            return states[pos]
        floor = pos.floor()
        frac = (pos - floor).unsqueeze(-1).float()
        t, y = floor.unsqueeze(-1).float(), states[floor.long()]
        h = frac / self.steps_per_position
        with torch.autocast(self.p0.device.type, enabled=False):
            # Integrate on from the integer grid point below, in as many steps as a unit gets
            # (exact at frac = 0).
            for _ in range(self.steps_per_position):
                y = rk4_step(self.dynamics, t, y, h)
                t = t + h
        return y

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        return x + self.scale * self.positions(pos).to(x.dtype)
