"""FLOATER (Liu et al. 2020): the RK4 integrator on ODEs with known solutions, and the
sinusoidal initialisation."""

from __future__ import annotations

import math

import pytest
import torch

from posx.encodings.floater import Floater, _RK4Solve, odeint_rk4
from posx.encodings.sinusoidal import sinusoidal_table


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
    parameter, up to float32 rounding."""
    torch.manual_seed(0)
    enc = Floater(16, steps_per_position=substeps, init=init)
    with torch.no_grad():
        for p in enc.net.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    got = enc.table(n)
    expected = odeint_rk4(enc.dynamics, enc.p0.float(), n, substeps)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
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
            lambda *a, s=substeps: _RK4Solve.apply(a[0], drift, 1.0 / s, s, True, *a[1:]),
            (p0, w1, b1, w2, b2),
        )


def test_the_solve_is_one_autograd_node():
    """The table's graph is one node, not ~30 per RK4 step (fails with the former solve)."""
    enc = Floater(8)
    assert type(enc.table(6).grad_fn).__name__ == "_RK4SolveBackward"


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
