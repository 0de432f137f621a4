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


class _RK4Solve(torch.autograd.Function):
    """RK4 of ``dp/dt = W2 tanh(W1 p + b1) + b2 + drift(t)`` with a hand-written backward.

    Forward inputs: ``p0 [d]``, ``drift [steps, 3, d]`` (the drift at each step's start,
    midpoint and end; no gradient), the step ``h``, steps per position, ``W1 [u, d]``,
    ``b1 [u]``, ``W2 [d, u]``, ``b2 [d]``, and ``keep``: whether to save the stages' inputs
    and hidden activations for a backward (not without gradients: at 32k they were a third of
    the evaluation's peak memory). Output: the states at every position, ``[n, d]``.
    """

    @staticmethod
    def forward(ctx, p0, drift, h, substeps, keep, w1, b1, w2, b2):  # noqa: ANN001, ANN205, D102
        steps = drift.shape[0]
        y = p0.unsqueeze(0)  # [1, d]: addmm instead of a product and a separate bias add
        states, inputs, hidden = [y], [], []
        for step in range(steps):
            ks, u = [], y
            # stage inputs y, y + h/2 k1, y + h/2 k2, y + h k3; drift at start, mid, mid, end
            for at, coef in ((0, h / 2), (1, h / 2), (1, h), (2, None)):
                a = torch.tanh(torch.addmm(b1, u, w1.t()))
                k = torch.addmm(b2, a, w2.t()) + drift[step, at]
                if keep:  # a backward will need them; evaluation at 32k would hold 8 n rows
                    inputs.append(u)
                    hidden.append(a)
                ks.append(k)
                if coef is not None:
                    u = y + coef * k
            y = y + h / 6 * (ks[0] + 2 * ks[1] + 2 * ks[2] + ks[3])
            if step % substeps == substeps - 1:
                states.append(y)
        empty = p0.new_zeros(0, p0.shape[0])
        ctx.save_for_backward(
            torch.cat(inputs) if inputs else empty,
            torch.cat(hidden) if hidden else p0.new_zeros(0, b1.shape[0]),
            w1,
            w2,
        )
        ctx.h, ctx.substeps = h, substeps
        return torch.cat(states)

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205, D102
        inputs, hidden, w1, w2 = ctx.saved_tensors
        h, substeps = ctx.h, ctx.substeps
        steps = inputs.shape[0] // 4
        slope = 1 - hidden * hidden  # tanh'
        g_out = grad.new_zeros(4 * steps, grad.shape[-1])  # d loss / d k of every stage
        g_y = grad.new_zeros(1, grad.shape[-1])
        for step in reversed(range(steps)):
            if step % substeps == substeps - 1:
                g_y = g_y + grad[step // substeps + 1]
            row = 4 * step
            g_k = [h / 6 * g_y, 2 * h / 6 * g_y, 2 * h / 6 * g_y, h / 6 * g_y]
            total = g_y
            # stage 4 reads y + h k3, stage 3 y + h/2 k2, stage 2 y + h/2 k1, stage 1 y
            for stage, coef in ((3, h), (2, h / 2), (1, h / 2), (0, None)):
                g_out[row + stage] = g_k[stage]
                g_u = ((g_k[stage] @ w2) * slope[row + stage]) @ w1
                total = total + g_u
                if coef is not None:
                    g_k[stage - 1] = g_k[stage - 1] + coef * g_u
            g_y = total
        g_y = g_y + grad[0]
        g_z = (g_out @ w2) * slope  # d loss / d (W1 u + b1) of every stage
        return (
            g_y.squeeze(0),
            None,
            None,
            None,
            None,
            g_z.t() @ inputs,
            g_z.sum(0),
            g_out.t() @ hidden,
            g_out.sum(0),
        )


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
            out = out + self._drift(t, p.dtype)
        return out

    def _drift(self, t: Tensor, dtype: torch.dtype) -> Tensor:
        """``s'(t)`` ``[..., d]`` for times ``t [..., 1]``: the sinusoid's time derivative."""
        half = torch.arange(self.d_model // 2, device=t.device, dtype=dtype)
        w = self.base ** (-2.0 * half / self.d_model)
        angles = t * w  # t [..., 1] * w [d/2]
        return torch.stack((w * angles.cos(), -w * angles.sin()), dim=-1).flatten(-2)

    def _solve(self, n: int) -> Tensor:
        """:func:`odeint_rk4` of :meth:`dynamics` from ``p0``: ``[n, d]`` float32.

        The drift ``s'(t)`` does not depend on the state, so it is computed for every stage
        time of the solve in one vectorised call before the loop (each RK4 stage evaluated it
        again: about ten small ops of a stage's fifteen). The whole solve is then one autograd
        node (:class:`_RK4Solve`): the forward runs without recording, and the backward walks
        the steps back by hand and forms each parameter's gradient as one product over all
        stages. The solve is ``4 n`` sequential MLP calls on one vector, so the per-op cost of
        autograd's recording and its per-node backward was most of FLOATER's training step.
        Same stage times and formulas as :func:`rk4_step` (the states and gradients agree up to
        float32 rounding; tests/unit/encodings/test_floater.py).
        """
        y, substeps = self.p0.float(), self.steps_per_position
        h = torch.full((1,), 1.0 / substeps, device=y.device, dtype=y.dtype)
        starts = [i + m / substeps for i in range(n - 1) for m in range(substeps)]
        t = torch.tensor(starts, device=y.device, dtype=y.dtype).unsqueeze(-1)  # [steps, 1]
        if self.init == "sinusoidal":
            drift = torch.stack([self._drift(x, y.dtype) for x in (t, t + h / 2, t + h)], 1)
        else:
            drift = y.new_zeros(len(starts), 3, self.d_model)
        first, second = self.net[0], self.net[2]
        weights = (first.weight, first.bias, second.weight, second.bias)
        keep = torch.is_grad_enabled() and (
            y.requires_grad or any(w.requires_grad for w in weights)
        )
        return _RK4Solve.apply(
            y, drift, 1.0 / substeps, substeps, keep, *(w.float() for w in weights)
        )

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
