"""Bias encodings of issue 3: learned ALiBi, KERPLE, Sandwich, FIRE, dynamic position bias.

Expected values are computed here from each paper's formula, never through the code under test
(the module's learned parameters are read, then the formula is applied by hand)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from posx.encodings.alibi import ALiBi, alibi_slopes
from posx.encodings.alibi_learned import ALiBiLearned
from posx.encodings.dynamic_bias import DynamicBias
from posx.encodings.fire import FIRE
from posx.encodings.kerple import KerpleLog, KerplePower
from posx.encodings.sandwich import Sandwich
from posx.kernels.bias import blocked_bias_attention
from posx.kernels.flex.attention import FLEX_AVAILABLE, flex_bias_attention, flex_unsupported_reason

POS = torch.arange(12)


def _visible_rows_decrease(bias: torch.Tensor, strict: bool = True) -> None:
    """For every head and query, the bias falls as the key moves back (distance 0, 1, ..)."""
    for h in range(bias.shape[0]):
        for i in range(1, bias.shape[1]):
            row = bias[h, i, : i + 1].flip(0)
            diff = row[1:] - row[:-1]
            assert (diff < 0).all() if strict else (diff <= 0).all(), (h, i)


# --- learned ALiBi ------------------------------------------------------------------------------


def test_alibi_learned_starts_at_alibi():
    enc = ALiBiLearned(n_heads=6, n_layers=3)
    assert enc.slopes().tolist() == pytest.approx(alibi_slopes(6), rel=1e-6)
    torch.testing.assert_close(enc.bias(POS, POS), ALiBi(6).bias(POS, POS))
    _visible_rows_decrease(enc.bias(POS, POS))


def test_alibi_learned_slopes_train_and_stay_positive():
    enc = ALiBiLearned(n_heads=4)
    with torch.no_grad():
        enc.log_slopes[0, 0] = -30.0
    assert (enc.slopes() > 0).all()
    enc.bias(POS, POS).tril().sum().backward()  # visible pairs only: the rest cancel out
    assert enc.log_slopes.grad is not None and enc.log_slopes.grad.abs().sum() > 0


def test_per_layer_parameters_give_each_layer_its_own_bias():
    enc = ALiBiLearned(n_heads=4, n_layers=3, per_layer=True)
    assert enc.log_slopes.shape == (3, 4)
    with torch.no_grad():
        enc.log_slopes[2] += 1.0
    b0, b2 = enc.for_layer(0).bias(POS, POS), enc.for_layer(2).bias(POS, POS)
    torch.testing.assert_close(b2, b0 * math.e)
    # The views own no parameters, so the model's parameter list has no duplicates.
    assert [n for n, _ in enc.named_parameters()] == ["log_slopes"]
    assert not list(enc.for_layer(1).parameters()) and ALiBiLearned(4, 3).for_layer(2) is not None


# --- KERPLE -------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [KerpleLog, KerplePower])
def test_kerple_formula_by_hand(cls):
    torch.manual_seed(0)
    enc = cls(n_heads=3, n_layers=2)
    q, k = torch.tensor([[3, 9], [20, 21]]), torch.tensor([[0, 2, 3], [1, 7, 20]])
    for layer in (0, 1):
        bias = enc.for_layer(layer).bias(q, k)
        assert bias.shape == (2, 3, 2, 3)
        r1, r2 = enc.r1(layer).tolist(), enc.r2(layer).tolist()
        for b in range(2):
            for h in range(3):
                for i in range(2):
                    for j in range(3):
                        dist = abs(q[b, i].item() - k[b, j].item())
                        if cls is KerpleLog:
                            want = -r1[h] * math.log(1 + r2[h] * dist)
                        else:
                            want = -r1[h] * dist ** r2[h]
                        assert bias[b, h, i, j].item() == pytest.approx(want, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("cls", [KerpleLog, KerplePower])
def test_kerple_init_follows_the_paper_and_decreases(cls):
    torch.manual_seed(1)
    enc = cls(n_heads=8, n_layers=2)
    r1, r2 = enc.r1(0), enc.r2(0)
    hi1, hi2 = (2.0, 1.0) if cls is KerpleLog else (1.0, 2.0)
    assert ((r1 > 0) & (r1 <= hi1 + 0.02)).all() and ((r2 > 0) & (r2 <= hi2 + 0.02)).all()
    bias = enc.for_layer(0).bias(POS, POS)
    _visible_rows_decrease(bias)
    assert bias[:, torch.arange(12), torch.arange(12)].abs().max() < 1e-6


@pytest.mark.parametrize("cls", [KerpleLog, KerplePower])
def test_kerple_constraints_hold_for_any_raw_value(cls):
    enc = cls(n_heads=2)
    with torch.no_grad():
        enc.r1_raw.copy_(torch.tensor([[-50.0, 50.0]]))
        enc.r2_raw.copy_(torch.tensor([[-50.0, 50.0]]))
    assert (enc.r1() >= 0.01).all() and (enc.r2() >= 0.01).all()
    if cls is KerplePower:
        assert (enc.r2() <= 2.0).all()
    enc.bias(POS, POS).tril().sum().backward()  # distance 0, fractional power: finite grads
    assert torch.isfinite(enc.r1_raw.grad).all() and torch.isfinite(enc.r2_raw.grad).all()


# --- Sandwich -----------------------------------------------------------------------------------


def test_sandwich_by_hand():
    h_count, d = 2, 8
    enc = Sandwich(n_heads=h_count, d_model=64, dim=d)
    q, k = torch.tensor([3, 50]), torch.tensor([0, 1, 3])
    bias = enc.bias(q, k)
    for h in range(h_count):
        for i, qi in enumerate(q.tolist()):
            for j, kj in enumerate(k.tolist()):
                t = qi - kj
                s = sum(math.cos(t / 10000 ** (2 * kk / d)) for kk in range(1, d // 2 + 1))
                want = (s - d / 2) / (8 * (h + 1) / h_count)
                assert bias[h, i, j].item() == pytest.approx(want, abs=1e-5)


def test_sandwich_is_zero_at_distance_zero_and_decays():
    enc = Sandwich(n_heads=4, d_model=64)
    far = torch.arange(4096)
    prof = enc.profile(far)
    assert prof[0].item() == pytest.approx(0.0, abs=1e-6)
    assert (prof[1:] < 0).all()  # every other distance is penalised
    assert (prof[1:7] < prof[:6]).all()  # strictly decreasing near the query
    # The trend over log-spaced distance buckets keeps falling (the sum oscillates locally).
    means = [prof[2**e : 2 ** (e + 1)].mean().item() for e in range(12)]
    assert all(b < a for a, b in zip(means, means[1:], strict=False))
    assert enc.head_scale.tolist() == pytest.approx([4 / (8 * h) for h in range(1, 5)])


def test_sandwich_float_positions_agree_with_integer_ones():
    enc = Sandwich(n_heads=2, d_model=32)
    q, k = torch.arange(700, 705), torch.arange(705)
    torch.testing.assert_close(enc.bias(q.float(), k.float()), enc.bias(q, k), atol=1e-4, rtol=0)


def test_sandwich_rejects_odd_dim():
    with pytest.raises(ValueError, match="even"):
        Sandwich(n_heads=2, d_model=32, dim=7)


# --- FIRE ---------------------------------------------------------------------------------------


def _fire_by_hand(enc: FIRE, qp: float, kp: float, layer: int) -> list[float]:
    c = enc.c[layer].item()
    L = abs(enc.threshold_mult[layer].item() * enc.init_threshold.item())
    x = math.log(abs(c * (qp - kp)) + 1) / (math.log(abs(c * max(qp, L)) + 1) + 1e-6)
    w1, b1 = enc.w1[layer].tolist(), enc.b1[layer].tolist()
    hidden = [max(0.0, x * a + b) for a, b in zip(w1, b1, strict=True)]
    w2, b2 = enc.w2[layer].tolist(), enc.b2[layer].tolist()
    rows = zip(w2, b2, strict=True)
    return [sum(w * v for w, v in zip(row, hidden, strict=True)) + bb for row, bb in rows]


def test_fire_by_hand_uses_the_query_position():
    torch.manual_seed(2)
    enc = FIRE(n_heads=3, n_layers=2, train_length=8, width=5)
    with torch.no_grad():
        enc.c[1] = 0.7
        enc.threshold_mult[1] = 1.5  # L = 12
    q, k = torch.tensor([2.0, 9.0, 40.0]), torch.tensor([0.0, 1.5, 9.0])
    for layer in (0, 1):
        bias = enc.for_layer(layer).bias(q, k)
        for i, qp in enumerate(q.tolist()):
            for j, kp in enumerate(k.tolist()):
                if kp <= qp:
                    want = _fire_by_hand(enc, qp, kp, layer)
                    assert bias[:, i, j].tolist() == pytest.approx(want, rel=1e-5, abs=1e-6)


def test_fire_normalisation_maps_visible_distances_into_unit_interval():
    enc = FIRE(n_heads=2, train_length=16)
    for s in (8, 16, 64, 1000):
        pos = torch.arange(s)
        x = enc.normalized_distance(pos, pos)
        visible = x[torch.tril(torch.ones(s, s, dtype=torch.bool))]
        assert visible.min() >= 0 and visible.max() <= 1.0
    # Below the threshold only the distance matters; above it the query position does too.
    short = enc.normalized_distance(torch.tensor([5, 10]), torch.tensor([0, 5]))
    assert short[0, 0].item() == pytest.approx(short[1, 1].item())
    long = enc.normalized_distance(torch.tensor([105, 1010]), torch.tensor([100, 1005]))
    assert long[0, 0].item() > long[1, 1].item()


def test_fire_threshold_defaults_to_training_length_and_needs_one():
    assert FIRE(n_heads=2, train_length=64).threshold().item() == 64.0
    assert FIRE(n_heads=2, train_length=64, init_threshold=512).threshold().item() == 512.0
    with pytest.raises(ValueError, match="init_threshold"):
        FIRE(n_heads=2)


# --- dynamic position bias ---------------------------------------------------------------------


def test_dynamic_bias_is_the_mlp_of_log_distance():
    torch.manual_seed(3)
    enc = DynamicBias(n_heads=3, width=8, depth=2)
    q, k = torch.tensor([4, 30]), torch.tensor([0, 4, 29])
    bias = enc.bias(q, k)
    lin = [m for m in enc.mlp if isinstance(m, torch.nn.Linear)]
    for i, qp in enumerate(q.tolist()):
        for j, kp in enumerate(k.tolist()):
            x = torch.tensor([[math.log1p(max(qp - kp, 0))]])
            x = F.silu(lin[1](F.silu(lin[0](x))))
            torch.testing.assert_close(bias[:, i, j], lin[2](x)[0], atol=1e-6, rtol=1e-5)


def test_dynamic_bias_integer_table_path_equals_direct_path():
    enc = DynamicBias(n_heads=2)
    q, k = torch.tensor([[5, 6, 9], [100, 101, 102]]), torch.tensor([[0, 5, 6], [3, 50, 101]])
    torch.testing.assert_close(enc.bias(q, k), enc.bias(q.float(), k.float()))


@pytest.mark.parametrize("floats", [False, True])
def test_dynamic_bias_mlp_runs_in_float32_under_autocast(floats):
    """A bf16 MLP rounds at each of its layers (4x the error of rounding the result once)."""
    torch.manual_seed(5)
    enc = DynamicBias(n_heads=2)
    pos = torch.arange(64).float() if floats else torch.arange(64)
    ref = enc.bias(pos, pos)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = enc.bias(pos, pos)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, ref, atol=1e-6, rtol=1e-6)


# --- every bias: blocked (per query block) and FlexAttention (per distance) agree -------------


@pytest.mark.skipif(not FLEX_AVAILABLE, reason="FlexAttention needs torch >= 2.5")
@pytest.mark.parametrize(
    "make",
    [
        lambda: ALiBiLearned(4, 2, per_layer=True).for_layer(1),
        lambda: KerpleLog(4, 2).for_layer(1),
        lambda: KerplePower(4, 2).for_layer(1),
        lambda: Sandwich(4, 32),
        lambda: DynamicBias(4),
    ],
    ids=["alibi_learned", "kerple_log", "kerple_power", "sandwich", "dynamic_bias"],
)
def test_blocked_and_flex_paths_agree(make):
    torch.manual_seed(4)
    enc = make()
    assert flex_unsupported_reason(enc) is None
    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))
    pos = torch.arange(6) + torch.tensor([[0], [7]])
    with torch.no_grad():
        blocked = blocked_bias_attention(q, k, v, pos, pos, enc.bias, 4)
        flex = flex_bias_attention(q, k, v, pos, pos, enc.bias, compile=False)
    torch.testing.assert_close(flex, blocked, atol=1e-5, rtol=1e-5)


def test_fire_takes_flex_attention_through_its_own_score_mod():
    """FIRE divides by a function of the query position: no per-distance table can hold it,
    so it gives FlexAttention its own score_mod (tests/unit/encodings/test_fire_flex.py)."""
    layer = FIRE(4, 2, train_length=6).for_layer(1)
    assert not layer.relative_bias and layer.has_score_mod
    assert flex_unsupported_reason(layer) is None


def test_fire_trains_with_the_blocked_kernel_on_cuda_and_evaluates_in_flex():
    """An H200 run (issue 58) showed FlexAttention's compiled backward failing on FIRE's MLP
    score_mod: training takes the blocked kernel there, evaluation keeps FlexAttention; ALiBi's
    own score_mod (no captured gradient) trains in FlexAttention."""
    from posx.encodings.alibi import ALiBi
    from posx.model.attention import choose_kernel

    cuda = torch.device("cuda")
    fire = FIRE(4, 2, train_length=6).for_layer(1)
    assert not fire.score_mod_trains
    assert choose_kernel(fire, cuda, needs_grad=True, flex_available=True) == "blocked"
    assert choose_kernel(fire, cuda, needs_grad=False, flex_available=True) == "flex"
    alibi = ALiBi(4)
    assert alibi.has_score_mod and alibi.score_mod_trains
    assert choose_kernel(alibi, cuda, needs_grad=True, flex_available=True) == "flex"
