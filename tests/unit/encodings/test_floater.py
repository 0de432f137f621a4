"""FLOATER (Liu et al. 2020): the RK4 integrator on ODEs with known solutions, and the
sinusoidal initialisation."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from posx.encodings import floater as floater_module
from posx.encodings.floater import Floater
from posx.encodings.sinusoidal import sinusoidal_table
from posx.kernels import ode as ode_module
from posx.kernels.ode import RK4Solve, odeint_rk4


def decay(t, y):
    return -y


def oscillator(t, y):
    """y = [sin t, cos t] solves y0' = y1, y1' = -y0."""
    return torch.stack((y[1], -y[0]))


def test_rk4_exponential_decay_is_fourth_order():
    y0 = torch.ones(1, dtype=torch.float64)
    t = torch.arange(11, dtype=torch.float64)
    errors = []
    for substeps in (2, 4, 8):
        got = odeint_rk4(decay, y0, 11, substeps)[:, 0]
        errors.append((got - torch.exp(-t)).abs().max().item())
    assert errors[-1] < 2e-6
    # Halving the step divides the error by ~2^4 = 16.
    assert 13 < errors[0] / errors[1] < 20 and 13 < errors[1] / errors[2] < 19


def test_rk4_oscillator_stays_on_sin_cos():
    y0 = torch.tensor([0.0, 1.0], dtype=torch.float64)
    got = odeint_rk4(oscillator, y0, 41, substeps=8)
    t = torch.arange(41, dtype=torch.float64)
    # Global error ~ steps * h^5 / 120 = 320 * 8^-5 / 120 ~ 8e-5 (phase drift).
    torch.testing.assert_close(got, torch.stack((t.sin(), t.cos()), -1), atol=1e-4, rtol=0)


@pytest.mark.parametrize(("substeps", "tol"), [(1, 2e-3), (4, 1e-5)])
def test_sinusoidal_init_reproduces_the_sinusoidal_table(substeps, tol):
    enc = Floater(d_model=16, steps_per_position=substeps)
    with torch.no_grad():
        got = enc.table(64)
    torch.testing.assert_close(got, sinusoidal_table(torch.arange(64), 16), atol=tol, rtol=0)


def test_float_positions_interpolate_along_the_ode():
    enc = Floater(d_model=8, steps_per_position=4)
    pos = torch.tensor([0.0, 2.5, 7.25])
    with torch.no_grad():
        got = enc.positions(pos)
    torch.testing.assert_close(got, sinusoidal_table(pos, 8), atol=1e-5, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(enc.positions(torch.tensor([3.0])), enc.table(4)[3:4])


def test_learns_and_cache_follows_parameters():
    torch.manual_seed(0)
    enc = Floater(d_model=8, init="random")
    x = torch.zeros(1, 5, 8)
    out = enc.embed(x, torch.arange(5))
    out.square().sum().backward()
    assert enc.net[0].weight.grad.abs().sum() > 0 and enc.p0.grad.abs().sum() > 0
    with torch.no_grad():
        before = enc.table(6).clone()
        enc.net[2].bias.add_(0.5)  # an optimizer step changes parameters in place
        after = enc.table(6)
    assert not torch.allclose(before, after)
    with torch.no_grad():
        torch.testing.assert_close(enc.table(6), after)


def test_bad_arguments():
    with pytest.raises(ValueError, match="init"):
        Floater(d_model=8, init="zeros")
    with pytest.raises(ValueError, match="even"):
        Floater(d_model=7)
    with pytest.raises(ValueError, match=">= 0"), torch.no_grad():
        Floater(d_model=8).positions(torch.tensor([-1.0]))
    assert math.isclose(Floater(d_model=16).scale, 0.25)


@pytest.mark.parametrize("n", [1, 2, 25])
@pytest.mark.parametrize("init", ["sinusoidal", "random"])
@pytest.mark.parametrize("substeps", [1, 3])
def test_solve_equals_the_generic_solver(init, substeps, n):
    """The table (drift precomputed, one autograd node with a hand-written backward) is what
    ``odeint_rk4`` of ``dynamics`` under autograd gave before: states and the gradient of every
    parameter, up to float32 rounding (the sums are ordered differently, and these perturbed
    weights amplify a rounding along the solve: states reach ~50, so a few 1e-6 of them)."""
    torch.manual_seed(0)
    enc = Floater(16, steps_per_position=substeps, init=init)
    with torch.no_grad():
        for p in enc.net.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    got = enc.table(n)
    expected = odeint_rk4(enc.dynamics, enc.p0.float(), n, substeps)
    torch.testing.assert_close(
        got, expected, rtol=0, atol=1e-6 * float(expected.detach().abs().max())
    )
    params = list(enc.parameters())
    weights = torch.linspace(-1, 1, got.numel()).view_as(got)
    for a, b in zip(
        torch.autograd.grad((got.sin() * weights).sum(), params, allow_unused=True),
        torch.autograd.grad((expected.sin() * weights).sum(), params, allow_unused=True),
        strict=True,
    ):
        if b is None:  # n = 1: the old graph never reached the MLP; the new one gives zeros
            assert a is None or not a.any()
            continue
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * float(b.abs().max()))


def test_hand_written_backward_passes_gradcheck():
    gen = torch.Generator().manual_seed(1)
    d, u, steps = 3, 4, 5

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64, requires_grad=True)

    p0, w1, b1, w2, b2 = rand(d), rand(u, d), rand(u), rand(d, u), rand(d)
    drift = torch.randn(steps, 3, d, generator=gen, dtype=torch.float64)
    for substeps in (1, 5):  # 5 steps: 5 positions of 1 step, or 1 position of 5
        assert torch.autograd.gradcheck(
            lambda *a, s=substeps: RK4Solve.apply(a[0], drift, 1.0 / s, s, True, *a[1:]),
            (p0, w1, b1, w2, b2),
        )


def test_the_solve_is_one_autograd_node():
    """The table's graph is one node, not ~30 per RK4 step (fails with the former solve)."""
    enc = Floater(8)
    assert type(enc.table(6).grad_fn).__name__ == "RK4SolveBackward"


def test_without_gradients_the_solve_saves_no_stage_activations(monkeypatch):
    """Evaluation keeps no per-stage inputs for a backward that never comes: at 32k they took
    FLOATER's peak(32k)/peak(8k) to 1.55 (bound 1.5; `make bench-eval`)."""
    saved = []
    real = torch.autograd.function.FunctionCtx.save_for_backward

    def spy(ctx, *tensors):
        saved.append([t.shape[0] for t in tensors[:2]])
        return real(ctx, *tensors)

    monkeypatch.setattr(torch.autograd.function.FunctionCtx, "save_for_backward", spy)
    enc = Floater(8)
    with torch.no_grad():
        states = enc.table(6)
    assert saved == [[0, 0]]  # inputs and hidden of no stage
    with_grad = enc.table(6)
    assert saved[-1] == [4 * 5, 4 * 5]  # 4 stages of each of the 5 steps, for the backward
    assert torch.equal(states, with_grad.detach())


def _perturbed(d, substeps=1, init="sinusoidal", hidden=None, seed=0, noise=0.3):
    torch.manual_seed(seed)
    enc = Floater(d, hidden=hidden, steps_per_position=substeps, init=init)
    with torch.no_grad():
        for p in enc.net.parameters():
            p.add_(torch.randn_like(p) * noise)
    return enc


def _grads(states, params):
    """Gradients of a fixed function of the states; zeros for parameters it does not reach (one
    position: the generic solver's graph never reaches the MLP)."""
    weights = torch.linspace(-1, 1, states.numel(), dtype=states.dtype).view_as(states)
    grads = torch.autograd.grad((states.sin() * weights).sum(), params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params, strict=True)]


@pytest.mark.parametrize("keep", [True, False])
@pytest.mark.parametrize("n", [1, 2, 17])
@pytest.mark.parametrize("init", ["sinusoidal", "random"])
@pytest.mark.parametrize("substeps", [1, 3])
def test_in_float64_the_solve_is_the_generic_solver(substeps, init, n, keep):
    """Without float32's rounding the solve is ``odeint_rk4`` of ``dynamics`` to 1e-12: the
    same RK4 steps, stage times and substeps (kept stages or the chunked evaluation path), and
    the hand-written backward is autograd's gradient of it."""
    enc = _perturbed(8, substeps, init, hidden=12).double()
    p0, (first, second) = enc.p0, (enc.net[0], enc.net[2])
    params = [p0, first.weight, first.bias, second.weight, second.bias]
    drift = enc._drift_table(n, p0)
    got = RK4Solve.apply(p0, drift, 1.0 / substeps, substeps, keep, *params[1:])
    expected = odeint_rk4(enc.dynamics, p0, n, substeps)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    if keep:
        for a, b in zip(_grads(got, params), _grads(expected, params), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


class _FormerRK4Solve(torch.autograd.Function):
    """The solve before issue 34's second round (commit ce6b4ec), kept as the reference: per
    stage a product, a bias add and a multiply by a Python number, each allocating its result;
    the backward a loop of the same shape."""

    @staticmethod
    def forward(ctx, p0, drift, h, substeps, keep, w1, b1, w2, b2, space=None):
        y = p0.unsqueeze(0)
        states, inputs, hidden = [y], [], []
        for step in range(drift.shape[0]):
            ks, u = [], y
            for at, coef in ((0, h / 2), (1, h / 2), (1, h), (2, None)):
                a = torch.tanh(torch.addmm(b1, u, w1.t()))
                k = torch.addmm(b2, a, w2.t()) + drift[step, at]
                inputs.append(u)
                hidden.append(a)
                ks.append(k)
                if coef is not None:
                    u = y + coef * k
            y = y + h / 6 * (ks[0] + 2 * ks[1] + 2 * ks[2] + ks[3])
            if step % substeps == substeps - 1:
                states.append(y)
        empty = p0.new_zeros(0, p0.shape[0])
        hidden = torch.cat(hidden) if hidden else p0.new_zeros(0, b1.shape[0])
        ctx.save_for_backward(torch.cat(inputs) if inputs else empty, hidden, w1, w2)
        ctx.h, ctx.substeps = h, substeps
        return torch.cat(states)

    @staticmethod
    def backward(ctx, grad):
        inputs, hidden, w1, w2 = ctx.saved_tensors
        h, substeps = ctx.h, ctx.substeps
        steps = inputs.shape[0] // 4
        slope = 1 - hidden * hidden
        g_out = grad.new_zeros(4 * steps, grad.shape[-1])
        g_y = grad.new_zeros(1, grad.shape[-1])
        for step in reversed(range(steps)):
            if step % substeps == substeps - 1:
                g_y = g_y + grad[step // substeps + 1]
            row = 4 * step
            g_k = [h / 6 * g_y, 2 * h / 6 * g_y, 2 * h / 6 * g_y, h / 6 * g_y]
            total = g_y
            for stage, coef in ((3, h), (2, h / 2), (1, h / 2), (0, None)):
                g_out[row + stage] = g_k[stage]
                g_u = ((g_k[stage] @ w2) * slope[row + stage]) @ w1
                total = total + g_u
                if coef is not None:
                    g_k[stage - 1] = g_k[stage - 1] + coef * g_u
            g_y = total
        g_y = g_y + grad[0]
        g_z = (g_out @ w2) * slope
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
            None,
        )


@pytest.mark.parametrize(
    ("d", "hidden", "n", "substeps", "init"),
    [
        (64, None, 64, 1, "sinusoidal"),
        (64, None, 64, 1, "random"),
        (16, 40, 25, 3, "sinusoidal"),
        (8, 8, 2, 1, "random"),
        (8, 8, 1, 2, "sinusoidal"),
        (32, 16, 33, 2, "random"),
    ],
)
def test_equals_the_former_solve(monkeypatch, d, hidden, n, substeps, init):
    """Training's table and every parameter's gradient, and evaluation's table, equal the
    former solve's (kept above) to float32 rounding; in float64 to 1e-12. Each float32 solve
    errs from the float64 one by up to ~2e-4 of the gradients' largest entry at 64 positions
    (64 steps amplify a rounding), the two in different directions, hence the tolerances."""
    enc = _perturbed(d, substeps, init, hidden=hidden, noise=0.05)
    params = list(enc.parameters())
    got = enc.table(n)
    got_grads = _grads(got, params)
    with torch.no_grad():
        got_eval = enc.table(n)
    monkeypatch.setattr(floater_module, "RK4Solve", _FormerRK4Solve)
    expected = enc.table(n)
    expected_grads = _grads(expected, params)
    scale = float(expected.detach().abs().max())
    torch.testing.assert_close(got, expected, rtol=0, atol=5e-6 * scale)
    torch.testing.assert_close(got_eval, expected.detach(), rtol=0, atol=5e-6 * scale)
    for a, b in zip(got_grads, expected_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=5e-4 * float(b.abs().max()) + 1e-30)
    wide = _perturbed(d, substeps, init, hidden=hidden, noise=0.05).double()
    w = (wide.net[0].weight, wide.net[0].bias, wide.net[2].weight, wide.net[2].bias)
    drift = wide._drift_table(n, wide.p0)
    for keep in (True, False):
        torch.testing.assert_close(
            RK4Solve.apply(wide.p0, drift, 1.0 / substeps, substeps, keep, *w),
            _FormerRK4Solve.apply(wide.p0, drift, 1.0 / substeps, substeps, keep, *w),
            rtol=1e-12,
            atol=1e-12,
        )


@pytest.mark.parametrize("chunk", [1, 4, 7, 256])
@pytest.mark.parametrize("substeps", [1, 2, 3])
def test_evaluation_solves_in_chunks_to_the_same_states(monkeypatch, chunk, substeps):
    """Without gradients the solve runs a few steps at a time through the same buffers; across
    chunk boundaries (and substeps that do not divide a chunk) the states are the training
    solve's, bit for bit."""
    monkeypatch.setattr(ode_module, "EVAL_CHUNK", chunk)
    enc = _perturbed(8, substeps, noise=0.05)
    trained = enc.table(12).detach()
    with torch.no_grad():
        assert torch.equal(enc.table(12), trained)


def test_training_keeps_one_workspace_and_no_values_in_it():
    """The drift and the buffers of a training solve are kept for the next step of the same
    length (and rebuilt for another): two forwards before their backwards, or a step after an
    optimizer update, get the gradients a fresh module gets."""
    enc, fresh = _perturbed(16, noise=0.05), _perturbed(16, noise=0.05)
    first, second = enc.table(9), enc.table(9)
    space = enc._workspace
    assert space is not None and space.drift.shape[0] == 8
    g_second = _grads(second, list(enc.parameters()))
    g_first = _grads(first, list(enc.parameters()))
    expected = _grads(fresh.table(9), list(fresh.parameters()))
    for a, b, c in zip(g_first, g_second, expected, strict=True):
        assert torch.equal(a, c) and torch.equal(b, c)
    with torch.no_grad():
        for module in (enc, fresh):
            module.net[0].weight.mul_(1.5)
            fresh._workspace = None
    again = _grads(enc.table(9), list(enc.parameters()))
    assert enc._workspace is space  # same length: reused
    for a, b in zip(again, _grads(fresh.table(9), list(fresh.parameters())), strict=True):
        assert torch.equal(a, b)
    enc.table(5).sum().backward()
    assert enc._workspace is not space and enc._workspace.drift.shape[0] == 4


@pytest.mark.parametrize(
    ("d", "init", "n", "noise"), [(16, "sinusoidal", 25, 0.3), (32, "random", 64, 0.1)]
)
def test_float32_solve_is_as_accurate_as_the_generic_solver(d, init, n, noise):
    """Against a float64 solve, the float32 table errs no more than ``odeint_rk4`` in float32
    does, summed over a few random ODEs (1.07 and 0.79 of it here; a product that accumulates
    the step's increment into the state, each piece rounded at the state's magnitude, gave
    2.9 and 1.9)."""
    ours, generic = [], []
    for seed in range(8):
        enc = _perturbed(d, 1, init, seed=seed, noise=noise)
        reference = copy.deepcopy(enc).double()
        with torch.no_grad():
            truth = odeint_rk4(reference.dynamics, reference.p0, n)
            ours.append(float((enc.table(n).double() - truth).abs().max()))
            f32 = odeint_rk4(enc.dynamics, enc.p0, n)
            generic.append(float((f32.double() - truth).abs().max()))
    assert sum(ours) <= 1.4 * sum(generic)
