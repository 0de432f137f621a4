"""Fixed-step classical Runge-Kutta (RK4) for FLOATER's position ODE, as one autograd node.

``dp/dt = W2 tanh(W1 p + b1) + b2 + drift(t)`` is solved along the position axis. The solve is
sequential and made of vector-sized calls, so what it costs is their dispatch:
:class:`RK4Solve` runs the forward unrecorded through preallocated rows and walks the steps back
by hand in its backward, forming each weight's gradient as one product over all stages.
:func:`odeint_rk4` is the plain generic solver, kept as the reference the fast one is tested
against (and used for fractional positions).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

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


# Steps per chunk of an evaluation solve (no gradient): its stage buffers are reused chunk after
# chunk, so memory does not grow with the length beyond the [n, d] states.
EVAL_CHUNK = 256


def _rk4_steps(ins: tuple, acts: tuple, bias: tuple, k: Tensor, net: tuple, h: float) -> None:
    """Runs ``len(bias) // 3`` RK4 steps of ``dp/dt = W2 tanh(W1 p + b1) + bias(t)`` in place.

    A step is 17 calls on vectors of ``d`` or ``u`` elements, and their dispatch is what the
    solve costs, so each call does as much as it can: every result goes into a preallocated
    row (``out=``, no allocation), the bias add rides in the product (``addmv``), and no
    Python number multiplies a tensor (that wraps it in a tensor first: 3.6 us a call here,
    against 1.2-2.2 us for each call below). Stage by stage the formulas of :func:`rk4_step`;
    the sums are ordered differently (``W2 a + (b2 + drift)``; ``y + alpha k`` rounded once),
    so the states agree with it to float32 rounding, not bit for bit. The update is
    ``y + h/6 (k1 + 2 k2 + 2 k3 + k4)`` with the bracket as one product and one add into
    ``y``: an ``addmv`` into ``y`` adds the terms to ``y`` one by one, each rounded at ``y``'s
    magnitude, and erred ~2x more against a float64 solve (``test_floater.py``).

    Args:
        ins: ``4 steps + 1`` rows ``[d]``: row ``4 i`` holds step ``i``'s state (row 0 is set
            by the caller), rows ``4 i + 1..3`` receive its stages' inputs, and row ``4 i + 4``
            the next state.
        acts: ``4 steps`` rows ``[u]`` that receive the stages' ``tanh`` activations.
        bias: ``3 steps`` rows ``[d]``: ``b2`` plus the drift at each step's start, midpoint
            and end.
        k: ``[4, d]`` scratch for the stage derivatives.
        net: ``(W1 [u, d], b1 [u], W2 [d, u], c [4])`` with ``c`` the weights of the update
            ``y + sum_j c_j k_j``.
        h: Step size.
    """
    w1, b1, w2, c = net
    k1, k2, k3, k4 = k.unbind(0)
    kt, half, addmv, add = k.t(), h / 2, torch.addmv, torch.add
    incr = k.new_empty(k.shape[1])
    for i in range(len(bias) // 3):
        y, u2, u3, u4, y_next = ins[4 * i : 4 * i + 5]
        a1, a2, a3, a4 = acts[4 * i : 4 * i + 4]
        start, mid, end = bias[3 * i : 3 * i + 3]
        addmv(b1, w1, y, out=a1).tanh_()
        add(y, addmv(start, w2, a1, out=k1), alpha=half, out=u2)
        addmv(b1, w1, u2, out=a2).tanh_()
        add(y, addmv(mid, w2, a2, out=k2), alpha=half, out=u3)
        addmv(b1, w1, u3, out=a3).tanh_()
        add(y, addmv(mid, w2, a3, out=k3), alpha=h, out=u4)
        addmv(b1, w1, u4, out=a4).tanh_()
        addmv(end, w2, a4, out=k4)
        add(y, torch.mv(kt, c, out=incr), alpha=h / 6, out=y_next)


class RK4Workspace:
    """A training solve's buffers and their row views, kept from one step to the next.

    The loops address single rows (``out=`` targets, operands), and making a view costs
    0.6-0.8 us: a 64-position solve made ~1,070 of them per step for the bias and the
    backward's buffers, plus 0.25 ms for the drift. Training solves the same length every
    step, so :class:`Floater` keeps one workspace for it. Nothing in it carries a value from one
    solve to the next: ``bias`` is written by each forward before its steps read it, and the
    backward writes ``g_k``, ``g_z`` and ``slope`` before reading them (so one module must not
    run two backwards at once, as it never does in a training step).

    Args:
        drift: ``[steps, 3, d]``, the drift at each step's start, midpoint and end.
        hidden: The MLP's hidden width ``u``.
    """

    def __init__(self, drift: Tensor, hidden: int) -> None:
        steps, _, d = drift.shape
        self.drift, self.bias = drift, torch.empty_like(drift)
        self.bias_rows = self.bias.view(-1, d).unbind(0)
        self.g_k = drift.new_empty(4 * steps, d)  # dL/dk of every stage
        self.g_z = drift.new_empty(4 * steps, hidden)  # dL/d(W1 u + b1) of every stage
        self.slope = torch.empty_like(self.g_z)  # tanh' of every stage
        self.one = drift.new_ones(())
        self.g_k_rows, self.g_z_rows = self.g_k.unbind(0), self.g_z.unbind(0)
        self.slope_rows = self.slope.unbind(0)
        self.g_k_blocks = self.g_k.view(steps, 4, d).unbind(0)
        self.g_z_blocks = self.g_z.view(steps, 4, hidden).transpose(1, 2).unbind(0)  # [u, 4]

    def fits(self, steps: int, hidden: int, like: Tensor) -> bool:
        """Whether the buffers have the shape, dtype and device of this solve."""
        return (
            self.g_z.shape == (4 * steps, hidden)
            and self.drift.dtype == like.dtype
            and self.drift.device == like.device
        )


def _rk4_steps_back(grads: tuple, space: RK4Workspace, w1: Tensor, w2: Tensor, h: float) -> Tensor:
    """Walks the steps of :func:`_rk4_steps` back; returns ``dL/dp0``.

    Fills ``space.g_k`` (``dL/dk`` of every stage) and ``space.g_z`` (``dL/dz``, ``z = W1 u +
    b1``) from ``space.slope`` (``tanh'`` of every stage).

    Args:
        grads: The states' incoming gradients, one row ``[d]`` per RK4 step that ends on a
            position (``None`` for a substep that does not), plus that of ``p0`` first.
        space: The solve's buffers (:class:`RK4Workspace`).
        w1: ``[u, d]``.
        w2: ``[d, u]``.
        h: Step size.

    Returns:
        ``[d]``: the gradient of ``p0``.
    """
    steps, (u, d) = len(space.g_k_blocks), w1.shape
    g_y = w1.new_zeros(1, d)  # dL/dy at the end of the step being walked
    c = w1.new_tensor([h / 6, h / 3, h / 3, h / 6]).unsqueeze(1)
    ones, total = c.new_ones(4), c.new_empty(u)
    w1t, w2t, half, mv, g = w1.t(), w2.t(), h / 2, torch.mv, g_y[0]
    gk_rows, gz_rows, slopes = space.g_k_rows, space.g_z_rows, space.slope_rows
    for i in reversed(range(steps)):
        if grads[i + 1] is not None:
            g.add_(grads[i + 1])
        k1, k2, k3, k4 = gk_rows[4 * i : 4 * i + 4]
        z1, z2, z3, z4 = gz_rows[4 * i : 4 * i + 4]
        s1, s2, s3, s4 = slopes[4 * i : 4 * i + 4]
        torch.mm(c, g_y, out=space.g_k_blocks[i])  # dL/dk_j = c_j dL/dy + what later stages add
        # stage 4 read y + h k3, stage 3 y + h/2 k2, stage 2 y + h/2 k1, stage 1 y
        k3.addmv_(w1t, mv(w2t, k4, out=z4).mul_(s4), alpha=h)
        k2.addmv_(w1t, mv(w2t, k3, out=z3).mul_(s3), alpha=half)
        k1.addmv_(w1t, mv(w2t, k2, out=z2).mul_(s2), alpha=half)
        mv(w2t, k1, out=z1).mul_(s1)
        g.addmv_(w1t, mv(space.g_z_blocks[i], ones, out=total))  # every stage read y
    return g.add_(grads[0])


def _solve_in_chunks(
    p0: Tensor, drift: Tensor, b2: Tensor, net: tuple, h: float, substeps: int
) -> Tensor:
    """The states ``[n, d]`` without keeping the stages: :data:`EVAL_CHUNK` steps at a time
    through the same buffers, so memory does not grow with the length beyond the states.

    Args:
        p0: ``[d]``.
        drift: ``[steps, 3, d]``.
        b2: ``[d]``.
        net: As for :func:`_rk4_steps`.
        h: Step size.
        substeps: RK4 steps per position.

    Returns:
        ``[steps / substeps + 1, d]``.
    """
    steps, d, u = drift.shape[0], p0.shape[0], net[1].shape[0]
    chunk = max(1, EVAL_CHUNK // substeps) * substeps  # ends on a position
    ins, acts, k = p0.new_empty(4 * chunk + 1, d), p0.new_empty(4 * chunk, u), p0.new_empty(4, d)
    rows, act_rows = ins.unbind(0), acts.unbind(0)
    states = p0.new_empty(steps // substeps + 1, d)
    states[0] = ins[0] = p0
    for first in range(0, steps, chunk):
        last = min(first + chunk, steps)
        bias = torch.add(drift[first:last], b2).view(-1, d).unbind(0)
        _rk4_steps(rows, act_rows, bias, k, net, h)
        every = 4 * substeps  # the chunk's states are every (4 substeps)-th row of ins
        states[first // substeps + 1 : last // substeps + 1] = ins[
            every : 4 * (last - first) + 1 : every
        ]
        ins[0] = ins[4 * (last - first)]  # where the next chunk starts
    return states


class RK4Solve(torch.autograd.Function):
    """RK4 of ``dp/dt = W2 tanh(W1 p + b1) + b2 + drift(t)`` with a hand-written backward.

    Forward inputs: ``p0 [d]``, ``drift [steps, 3, d]`` (the drift at each step's start,
    midpoint and end; no gradient), the step ``h``, steps per position, ``keep``: whether to
    save the stages' inputs and hidden activations for a backward (not without gradients: at
    32k they were a third of the evaluation's peak memory; :func:`_solve_in_chunks` then runs),
    ``W1 [u, d]``, ``b1 [u]``, ``W2 [d, u]``, ``b2 [d]``, and optionally a :class:`RK4Workspace`
    built from this ``drift`` (else one is made). Output: the states at every position,
    ``[n, d]``.
    """

    @staticmethod
    def forward(ctx, p0, drift, h, substeps, keep, w1, b1, w2, b2, space=None):  # noqa: ANN001, ANN205, D102
        steps, d, u = drift.shape[0], p0.shape[0], b1.shape[0]
        net = (w1, b1, w2, p0.new_tensor([1.0, 2.0, 2.0, 1.0]))
        ctx.h, ctx.substeps, ctx.space = h, substeps, None
        if not keep:  # nothing is saved for a backward that never comes
            ctx.save_for_backward(p0.new_zeros(0, d), p0.new_zeros(0, u), w1, w2)
            return _solve_in_chunks(p0, drift, b2, net, h, substeps)
        if space is None or space.drift is not drift:
            space = RK4Workspace(drift, u)
        torch.add(drift, b2, out=space.bias)
        ins, acts = p0.new_empty(4 * steps + 1, d), p0.new_empty(4 * steps, u)
        ins[0] = p0
        _rk4_steps(ins.unbind(0), acts.unbind(0), space.bias_rows, p0.new_empty(4, d), net, h)
        ctx.save_for_backward(ins[:-1], acts, w1, w2)
        ctx.space = space
        return ins[:: 4 * substeps].clone()  # the states: every (4 substeps)-th row

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205, D102
        inputs, hidden, w1, w2 = ctx.saved_tensors
        h, substeps, space = ctx.h, ctx.substeps, ctx.space
        rows = grad.unbind(0)
        ends = [
            rows[i // substeps + 1] if i % substeps == substeps - 1 else None
            for i in range(inputs.shape[0] // 4)
        ]
        torch.addcmul(space.one, hidden, hidden, value=-1, out=space.slope)  # tanh'
        g_p0 = _rk4_steps_back((rows[0], *ends), space, w1, w2, h)
        g_k, g_z = space.g_k, space.g_z
        grads = (g_z.t() @ inputs, g_z.sum(0), g_k.t() @ hidden, g_k.sum(0))
        return (g_p0, None, None, None, None, *grads, None)
