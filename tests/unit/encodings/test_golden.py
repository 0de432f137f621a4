"""Golden values: every expected number is computed here from the paper's formula (or written
out by hand), never through the code path under test."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from posx.encodings.alibi import ALiBi, alibi_slopes
from posx.encodings.learned import Learned
from posx.encodings.rope import RoPE
from posx.encodings.sinusoidal import Sinusoidal, sinusoidal_table
from posx.encodings.t5 import T5Bias, t5_bucket

# --- ALiBi (Press et al. 2022) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (8, [2.0**-k for k in range(1, 9)]),
        (6, [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125]),
        (
            12,
            [2.0**-k for k in range(1, 9)] + [0.7071068, 0.3535534, 0.1767767, 0.0883883],
        ),
        (1, [2.0**-8]),
        (2, [2.0**-4, 2.0**-8]),
        (4, [0.25, 0.0625, 0.015625, 0.00390625]),
    ],
)
def test_alibi_slopes(n, expected):
    got = alibi_slopes(n)
    assert len(got) == n
    assert got == pytest.approx(expected, abs=1e-6)


def test_alibi_slopes_reject_non_positive_heads():
    with pytest.raises(ValueError):
        alibi_slopes(0)


def test_alibi_bias_is_minus_slope_times_distance():
    pos = torch.arange(5)
    bias = ALiBi(4).bias(pos, pos)
    assert bias.shape == (4, 5, 5)
    slopes = [0.25, 0.0625, 0.015625, 0.00390625]  # 2^(-8/4 * (h + 1))
    for h, m in enumerate(slopes):
        for i in range(5):
            for j in range(i + 1):
                assert bias[h, i, j].item() == pytest.approx(-m * (i - j), abs=1e-7)
            # Visible keys: the bias never increases as the key gets farther away.
            row = bias[h, i, : i + 1].flip(0)  # distance 0, 1, .., i
            assert (row[1:] <= row[:-1]).all()


def test_alibi_bias_per_batch_positions():
    q = torch.tensor([[3, 4], [10, 12]])
    k = torch.tensor([[0, 1, 3], [2, 5, 7]])
    bias = ALiBi(2).bias(q, k)
    assert bias.shape == (2, 2, 2, 3)
    slopes = [2.0**-4, 2.0**-8]
    for b in range(2):
        for h, m in enumerate(slopes):
            for i in range(2):
                for j in range(3):
                    expected = -m * (q[b, i] - k[b, j]).item()
                    assert bias[b, h, i, j].item() == pytest.approx(expected, abs=1e-7)


# --- T5 relative buckets (Raffel et al. 2020), causal variant -----------------------------


def test_t5_bucket_values():
    distance = list(range(16)) + [16, 20, 32, 64, 100, 127, 128, 1000]
    expected = list(range(16)) + [16, 17, 21, 26, 30, 31, 31, 31]
    got = t5_bucket(torch.tensor(distance), 32, 128)
    assert got.tolist() == expected


def test_t5_bucket_formula():
    """bucket(n) = 16 + floor(log(n / 16) / log(128 / 16) * 16), capped at 31, for n >= 16."""
    distance = torch.arange(0, 300)
    got = t5_bucket(distance, 32, 128).tolist()
    for n, b in zip(distance.tolist(), got, strict=True):
        want = n if n < 16 else min(31, 16 + int(math.log(n / 16) / math.log(8) * 16))
        assert b == want, n


def test_t5_bucket_negative_distance_is_bucket_zero():
    assert t5_bucket(torch.tensor([-1, -5, -1000]), 32, 128).tolist() == [0, 0, 0]


def test_t5_bucket_is_monotone_and_in_range():
    got = t5_bucket(torch.arange(5000), 32, 128)
    assert got.min() == 0 and got.max() == 31
    assert (got[1:] >= got[:-1]).all()


def test_t5_bias_shape_and_lookup():
    enc = T5Bias(n_heads=3, num_buckets=32, max_distance=128)
    q, k = torch.arange(40, 45), torch.arange(45)
    bias = enc.bias(q, k)
    assert bias.shape == (3, 5, 45)
    table = enc.table.weight  # [buckets, heads]
    for i in (0, 4):
        for j in (0, 10, 44):
            d = q[i].item() - k[j].item()
            bucket = max(d, 0) if d < 16 else min(31, 16 + int(math.log(d / 16) / math.log(8) * 16))
            torch.testing.assert_close(bias[:, i, j], table[bucket])


def test_t5_bias_is_shared_by_all_layers(make_tiny_model):
    model = make_tiny_model("t5", "model.n_layers=3")
    assert isinstance(model.encoding, T5Bias)
    for i in range(len(model.blocks)):
        assert model.encoding.for_layer(i) is model.encoding
    t5_params = [n for n, _ in model.named_parameters() if n.startswith("encoding.")]
    assert t5_params == ["encoding.table.weight"]


# --- Sinusoidal (Vaswani et al. 2017) -----------------------------------------------------


@pytest.mark.parametrize(("p", "d"), [(3, 8), (0, 8), (17, 16), (1000, 4), (2.5, 8)])
def test_sinusoidal_table(p, d):
    got = sinusoidal_table(torch.tensor([p]), d)[0]
    assert got.shape == (d,)
    for i in range(d // 2):
        angle = p / 10000 ** (2 * i / d)
        assert got[2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
        assert got[2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)


def test_sinusoidal_table_hand_values_d8_p3():
    got = sinusoidal_table(torch.tensor(3), 8)
    expected = [
        math.sin(3.0), math.cos(3.0),
        math.sin(0.3), math.cos(0.3),
        math.sin(0.03), math.cos(0.03),
        math.sin(0.003), math.cos(0.003),
    ]  # fmt: skip
    assert got.tolist() == pytest.approx(expected, abs=1e-6)


def test_sinusoidal_embed_adds_scaled_table():
    enc = Sinusoidal(d_model=8, scale=1.0)
    x = torch.zeros(2, 3, 8)
    out = enc.embed(x, torch.arange(3))
    assert out.shape == (2, 3, 8)
    assert out[1, 2, 0].item() == pytest.approx(math.sin(2.0), abs=1e-6)
    assert out[1, 2, 1].item() == pytest.approx(math.cos(2.0), abs=1e-6)


FAR = [10_000, 12_345, 54_321, 100_000, 314_159, 999_999, 1_000_000]


def _sinusoid_float64(positions, d, base=10000.0):
    """The paper's formula in float64 (numpy), independent of the code under test."""
    p = np.asarray(positions, dtype=np.float64)[:, None]
    angles = p / base ** (2 * np.arange(d // 2) / d)
    return np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(len(positions), d)


@pytest.mark.parametrize("dtype", [torch.long, torch.float64])
def test_sinusoidal_table_is_exact_at_large_positions(dtype):
    # float32 phases drift by ~1e-2 at 1e6 (the angle itself is off by ulp(1e6) ~ 0.06 rad).
    got = sinusoidal_table(torch.tensor(FAR, dtype=dtype), 64)
    want = _sinusoid_float64(FAR, 64)
    assert np.abs(got.double().numpy() - want).max() < 1e-6


def test_sinusoidal_embed_is_exact_at_large_positions():
    enc = Sinusoidal(d_model=32, scale=1.0)
    out = enc.embed(torch.zeros(1, len(FAR), 32), torch.tensor(FAR))
    assert out.dtype == torch.float32
    assert np.abs(out[0].double().numpy() - _sinusoid_float64(FAR, 32)).max() < 1e-6


def test_sinusoidal_rejects_odd_width():
    with pytest.raises(ValueError):
        Sinusoidal(d_model=7)


# --- RoPE (Su et al. 2021) ----------------------------------------------------------------


def _qk(d, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(1, 1, 1, d, generator=gen), torch.randn(1, 1, 1, d, generator=gen)


def _score(enc, q, k, m, n):
    dtype = torch.float32 if isinstance(m, float) else torch.long
    qr, kr = enc.rotate(q, k, torch.tensor([m], dtype=dtype), torch.tensor([n], dtype=dtype))
    return (qr * kr).sum().item()


def test_rope_preserves_norms():
    enc = RoPE(head_dim=16)
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 7, 16, generator=gen), torch.randn(2, 3, 7, 16, generator=gen)
    pos = torch.arange(100, 107)
    qr, kr = enc.rotate(q, k, pos, pos)
    torch.testing.assert_close(qr.norm(dim=-1), q.norm(dim=-1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(kr.norm(dim=-1), k.norm(dim=-1), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_rope_score_depends_only_on_offset(fraction):
    enc = RoPE(head_dim=16, rotary_fraction=fraction)
    q, k = _qk(16)
    ref = _score(enc, q, k, 5, 2)
    assert _score(enc, q, k, 13, 10) == pytest.approx(ref, abs=1e-5)
    assert _score(enc, q, k, 3, 0) == pytest.approx(ref, abs=1e-5)
    # Different offsets give different scores (the check above is not vacuous).
    assert _score(enc, q, k, 5, 1) != pytest.approx(ref, abs=1e-5)


@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_rope_score_depends_only_on_offset_float_positions(fraction):
    enc = RoPE(head_dim=16, rotary_fraction=fraction)
    q, k = _qk(16, seed=1)
    ref = _score(enc, q, k, 5.5, 2.25)
    assert _score(enc, q, k, 13.5, 10.25) == pytest.approx(ref, abs=1e-5)
    assert _score(enc, q, k, 3.25, 0.0) == pytest.approx(ref, abs=1e-5)


def test_rope_partial_rotation_leaves_the_rest_unchanged():
    enc = RoPE(head_dim=16, rotary_fraction=0.5)
    assert enc.rot_dim == 8
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 2, 5, 16, generator=gen), torch.randn(2, 2, 5, 16, generator=gen)
    pos = torch.arange(3, 8)
    qr, kr = enc.rotate(q, k, pos, pos)
    torch.testing.assert_close(qr[..., 8:], q[..., 8:], atol=0, rtol=0)
    torch.testing.assert_close(kr[..., 8:], k[..., 8:], atol=0, rtol=0)
    assert not torch.allclose(qr[..., :8], q[..., :8])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_hand_rotation_adjacent_pairs(dtype):
    """Pair (x_{2i}, x_{2i+1}) turns by angle p * base^(-2i / r), as in the paper; the complex
    (float32) and real (bf16) code paths agree with it."""
    d, p = 8, 7
    enc = RoPE(head_dim=d)
    q, k = _qk(d, seed=3)
    qr, _ = enc.rotate(q.to(dtype), k.to(dtype), torch.tensor([p]), torch.tensor([p]))
    x, got = q.to(dtype).float().flatten().tolist(), qr.float().flatten().tolist()
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    for i in range(d // 2):
        theta = p * 10000 ** (-2 * i / d)
        c, s = math.cos(theta), math.sin(theta)
        assert got[2 * i] == pytest.approx(x[2 * i] * c - x[2 * i + 1] * s, abs=tol)
        assert got[2 * i + 1] == pytest.approx(x[2 * i] * s + x[2 * i + 1] * c, abs=tol)


@pytest.mark.parametrize(("head_dim", "fraction"), [(6, 0.5), (5, 1.0), (2, 0.25)])
def test_rope_odd_rotary_dimension_raises(head_dim, fraction):
    with pytest.raises(ValueError, match="rotary"):
        RoPE(head_dim=head_dim, rotary_fraction=fraction)


def test_rope_cache_grows_on_demand():
    enc = RoPE(head_dim=8)
    q, k = _qk(8, seed=4)
    small = _score(enc, q, k, 5, 2)  # fills a small table first
    assert _score(enc, q, k, 5000, 4997) == pytest.approx(small, abs=1e-3)
    # Integer (cached) and float (computed) positions agree at large positions.
    pos_i = torch.tensor([4000, 4500, 5000])
    q3, k3 = q.expand(1, 1, 3, 8), k.expand(1, 1, 3, 8)
    qi, ki = enc.rotate(q3, k3, pos_i, pos_i)
    qf, kf = enc.rotate(q3, k3, pos_i.float(), pos_i.float())
    torch.testing.assert_close(qi, qf, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ki, kf, atol=1e-5, rtol=1e-5)
    # And earlier positions are unaffected by the growth.
    assert _score(enc, q, k, 5, 2) == pytest.approx(small, abs=1e-6)


# --- Learned absolute ---------------------------------------------------------------------


def test_learned_reports_its_limit():
    enc = Learned(d_model=8, max_len=16)
    assert enc.max_len == 16
    reason = enc.unsupported_reason(17)
    assert isinstance(reason, str) and reason.strip()
    assert enc.unsupported_reason(16) is None
    assert enc.unsupported_reason(1) is None


def test_learned_embed_adds_table_rows():
    enc = Learned(d_model=8, max_len=16)
    x = torch.zeros(2, 4, 8)
    pos = torch.tensor([[0, 1, 2, 3], [5, 6, 7, 15]])
    out = enc.embed(x, pos)
    torch.testing.assert_close(out[1, 3], enc.table.weight[15])
    torch.testing.assert_close(out[0, 0], enc.table.weight[0])
