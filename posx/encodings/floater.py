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
``4 * steps_per_position * n`` small MLP calls per forward (the paper's noted overhead), each
a few microseconds of dispatch on a CPU. In inference the table is cached and grown on demand
until a parameter changes.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posx.encodings.base import PositionalEncoding
from posx.encodings.sinusoidal import sinusoidal_table
from posx.kernels.ode import RK4Solve, RK4Workspace, rk4_step


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
        self._workspace: RK4Workspace | None = None

    def dynamics(self, t: Tensor, p: Tensor) -> Tensor:
        """``h(t, p) = s'(t) + MLP(p)``; ``t [..., 1]`` broadcasts with ``p [..., d]``."""
        out = self.net(p)
        if self.init == "sinusoidal":
            out = out + self._drift(t, p.dtype)
        return out

    def _drift(self, t: Tensor, dtype: torch.dtype) -> Tensor:
        """``s'(t)`` ``[..., d]`` for times ``t [..., 1]``: the sinusoid's time derivative."""
        half = torch.arange(self.d_model // 2, device=t.device, dtype=dtype)
        w = self.base ** (-2.0 * half / self.d_model)
        angles = t * w  # t [..., 1] * w [d/2]
        return torch.stack((w * angles.cos(), -w * angles.sin()), dim=-1).flatten(-2)

    def _solve(self, n: int) -> Tensor:
        """:func:`posx.kernels.ode.odeint_rk4` of :meth:`dynamics` from ``p0``: ``[n, d]`` float32.

        The drift ``s'(t)`` does not depend on the state, so it is computed for every stage
        time of the solve in one vectorised call before the loop (:meth:`_drift_table`). The
        whole solve is one autograd node (:class:`RK4Solve`): the forward runs without
        recording, and the backward walks the steps back by hand and forms each parameter's
        gradient as one product over all stages. The solve is ``4 n`` sequential MLP calls on
        one vector, so its cost is the number of small calls per RK4 step (17 forward, 14
        back, in :mod:`posx.kernels.ode`) and of row views; training keeps its drift and buffers
        from one step to the next (:class:`RK4Workspace`). Same stage times and formulas as
        :func:`rk4_step` (the states and gradients agree up to float32 rounding, and to 1e-12
        in float64; tests/unit/encodings/test_floater.py).
        """
        y = self.p0.float()
        first, second = self.net[0], self.net[2]
        weights = (first.weight, first.bias, second.weight, second.bias)
        keep = torch.is_grad_enabled() and (
            y.requires_grad or any(w.requires_grad for w in weights)
        )
        space, steps = self._workspace, (n - 1) * self.steps_per_position
        if not keep:
            drift, space = self._drift_table(n, y), None
        elif space is not None and space.fits(steps, first.bias.shape[0], y):
            drift = space.drift
        else:  # training solves one length: its drift and buffers are kept (RK4Workspace)
            drift = self._drift_table(n, y)
            space = self._workspace = RK4Workspace(drift, first.bias.shape[0])
        h = 1.0 / self.steps_per_position
        floats = (w.float() for w in weights)
        return RK4Solve.apply(y, drift, h, self.steps_per_position, keep, *floats, space)

    def _drift_table(self, n: int, like: Tensor) -> Tensor:
        """``s'(t)`` at each RK4 step's start, midpoint and end up to position ``n - 1``:
        ``[steps, 3, d]`` (zeros for ``init="random"``, which has no drift)."""
        substeps = self.steps_per_position
        h = torch.full((1,), 1.0 / substeps, device=like.device, dtype=like.dtype)
        starts = [i + m / substeps for i in range(n - 1) for m in range(substeps)]
        if self.init != "sinusoidal":
            return like.new_zeros(len(starts), 3, self.d_model)
        t = torch.tensor(starts, device=like.device, dtype=like.dtype).unsqueeze(-1)  # [steps, 1]
        return torch.stack([self._drift(x, like.dtype) for x in (t, t + h / 2, t + h)], 1)

    def table(self, n: int) -> Tensor:
        """``p(t)`` at ``t = 0..n-1``: ``[n, d]`` float32 (cached while parameters are unchanged
        and gradients are off)."""
        key = (self.p0.device, tuple(p._version for p in self.parameters()))
        if not torch.is_grad_enabled() and self._cache is not None:
            cached_key, cached = self._cache
            if cached_key == key and cached.shape[0] >= n:
                return cached[:n]
        with torch.autocast(self.p0.device.type, enabled=False):  # an ODE wants full precision
            states = self._solve(n)
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
