"""Inference-time RoPE scaling: golden values from each method's formula, computed here by hand,
plus the eval-time override path (``encoding.scaling.type=... encoding.scaling.factor=...``)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from posx.config.build import build_encoding
from posx.config.compose import compose
from posx.config.saved import apply_overrides
from posx.encodings.rope import RoPE
from posx.encodings.rope_scaling import (
    RopeScaling,
    dynamic_ntk_base,
    ntk_base,
    scaled_inv_freq,
    yarn_attention_scale,
    yarn_ramp_range,
)
from posx.errors import ConfigError


def _freqs(base: float, d: int) -> list[float]:
    return [base ** (-2 * j / d) for j in range(d // 2)]


# --- the numbers quoted by the papers and the issue ------------------------------------------


def test_ntk_base_d128_alpha8():
    assert ntk_base(10000.0, 8.0, 128) == pytest.approx(82684.6, abs=0.05)
    by_hand = 10000 * 8 ** (128 / 126)  # the formula itself
    assert by_hand == pytest.approx(82684.6, abs=0.05)


@pytest.mark.parametrize(
    ("d", "length", "s", "ramp", "scale"),
    [(64, 512, 4.0, (3, 16), 1.1386), (128, 4096, 16.0, (20, 46), 1.2773)],
)
def test_yarn_ramp_and_attention_scale(d, length, s, ramp, scale):
    assert yarn_ramp_range(d, 10000.0, length, 32.0, 1.0) == ramp
    # By hand: dimension j turns L / (2 pi 10000^(2j/d)) times over L tokens.
    low = math.floor(d * math.log(length / (32 * 2 * math.pi)) / (2 * math.log(10000)))
    high = math.ceil(d * math.log(length / (1 * 2 * math.pi)) / (2 * math.log(10000)))
    assert (low, high) == ramp
    assert yarn_attention_scale(s) == pytest.approx(scale, abs=5e-5)
    assert 0.1 * math.log(s) + 1 == pytest.approx(scale, abs=5e-5)


def test_dynamic_ntk_base_only_past_the_trained_length():
    assert dynamic_ntk_base(10000.0, 4.0, 512, 512, 64) == 10000.0
    assert dynamic_ntk_base(10000.0, 4.0, 100, 512, 64) == 10000.0
    want = 10000 * (4 * 2048 / 512 - 3) ** (64 / 62)
    assert dynamic_ntk_base(10000.0, 4.0, 2048, 512, 64) == pytest.approx(want, rel=1e-12)


# --- frequencies per method ------------------------------------------------------------------


def _scaled(kind: str, d: int = 64, length: int = 512, s: float = 4.0, **kw) -> list[float]:
    scaling = RopeScaling(type=kind, factor=s, original_length=length, **kw)
    return scaled_inv_freq(scaling, 10000.0, d).tolist()


def test_linear_divides_every_frequency():
    want = [f / 4 for f in _freqs(10000.0, 64)]
    assert _scaled("linear") == pytest.approx(want, rel=1e-6)


def test_ntk_frequencies_use_the_new_base():
    base = 10000 * 4 ** (64 / 62)
    assert _scaled("ntk") == pytest.approx(_freqs(base, 64), rel=1e-6)
    # The highest frequency is untouched; the lowest is divided by exactly alpha.
    got = _scaled("ntk")
    assert got[0] == pytest.approx(1.0)
    assert got[-1] == pytest.approx(_freqs(10000.0, 64)[-1] / 4 ** (64 / 62 * 62 / 64), rel=1e-5)


def test_yarn_frequencies_by_hand():
    d, s = 64, 4.0
    base_f = _freqs(10000.0, d)
    low, high = 3, 16
    want = []
    for j, f in enumerate(base_f):
        ramp = min(1.0, max(0.0, (j - low) / (high - low)))
        want.append(f / s * ramp + f * (1 - ramp))
    got = _scaled("yarn", d=d, s=s)
    assert got == pytest.approx(want, rel=1e-6)
    assert got[: low + 1] == pytest.approx(base_f[: low + 1], rel=1e-6)  # kept
    assert got[high:] == pytest.approx([f / s for f in base_f[high:]], rel=1e-6)  # interpolated


def test_llama3_frequencies_by_hand():
    d, length, s = 64, 512, 8.0
    got = _scaled("llama3", d=d, length=length, s=s)
    for f, g in zip(_freqs(10000.0, d), got, strict=True):
        wavelen = 2 * math.pi / f
        if wavelen < length / 4:
            want = f
        elif wavelen > length / 1:
            want = f / s
        else:
            smooth = (length / wavelen - 1) / (4 - 1)
            want = (1 - smooth) * f / s + smooth * f
        assert g == pytest.approx(want, rel=1e-6)
    kinds = {"kept": 0, "scaled": 0, "blend": 0}
    for f in _freqs(10000.0, d):  # the example really covers all three bands
        w = 2 * math.pi / f
        kinds["kept" if w < 128 else "scaled" if w > 512 else "blend"] += 1
    assert all(kinds.values())


# --- the encoding under scaling ----------------------------------------------------------------


def _score(enc: RoPE, q: torch.Tensor, k: torch.Tensor, m, n) -> float:
    dtype = torch.float32 if isinstance(m, float) else torch.long
    qr, kr = enc.rotate(q, k, torch.tensor([m], dtype=dtype), torch.tensor([n], dtype=dtype))
    return (qr * kr).sum().item()


def _qk(d: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(1, 1, 1, d, generator=gen), torch.randn(1, 1, 1, d, generator=gen)


def test_linear_scaling_equals_interpolated_positions():
    plain = RoPE(16)
    scaled = RoPE(16, scaling={"type": "linear", "factor": 4.0}, train_length=32)
    q, k = _qk(16)
    assert _score(scaled, q, k, 40, 12) == pytest.approx(_score(plain, q, k, 10.0, 3.0), abs=1e-5)


@pytest.mark.parametrize("kind", ["linear", "ntk", "yarn", "llama3"])
def test_static_scalings_keep_relative_invariance(kind):
    enc = RoPE(16, scaling={"type": kind, "factor": 4.0}, train_length=32)
    q, k = _qk(16, seed=1)
    ref = _score(enc, q, k, 9, 2)
    assert _score(enc, q, k, 109, 102) == pytest.approx(ref, abs=1e-4)
    assert _score(enc, q, k, 9.0, 2.0) == pytest.approx(ref, abs=1e-4)  # float path agrees


def test_yarn_scales_scores_by_the_squared_temperature():
    plain = RoPE(64)
    yarn = RoPE(64, scaling={"type": "yarn", "factor": 4.0}, train_length=512)
    q, k = _qk(64, seed=2)
    # At offset 0 rotations cancel, so only the temperature is left: (0.1 ln 4 + 1)^2.
    ratio = _score(yarn, q, k, 7, 7) / _score(plain, q, k, 7, 7)
    assert ratio == pytest.approx((0.1 * math.log(4) + 1) ** 2, rel=1e-5)


def test_yarn_temperature_covers_pass_through_dims():
    enc = RoPE(16, rotary_fraction=0.5, scaling={"type": "yarn", "factor": 4.0}, train_length=64)
    q, k = _qk(16, seed=3)
    qr, _ = enc.rotate(q, k, torch.tensor([5]), torch.tensor([5]))
    torch.testing.assert_close(qr[..., 8:], q[..., 8:] * (0.1 * math.log(4) + 1))


def test_dynamic_ntk_matches_plain_rope_inside_and_ntk_rope_outside():
    d, length, s = 16, 32, 4.0
    enc = RoPE(d, scaling={"type": "dynamic_ntk", "factor": s}, train_length=length)
    q = torch.randn(1, 1, 64, d, generator=torch.Generator().manual_seed(4))
    k = torch.randn(1, 1, 64, d, generator=torch.Generator().manual_seed(5))
    short = torch.arange(32)
    got = enc.rotate(q[..., :32, :], k[..., :32, :], short, short)
    want = RoPE(d).rotate(q[..., :32, :], k[..., :32, :], short, short)
    torch.testing.assert_close(got, want)
    long = torch.arange(64)  # T = 64 > L = 32: base' = base (s T / L - (s - 1))^(d / (d - 2))
    base = 10000 * (s * 64 / length - (s - 1)) ** (d / (d - 2))
    got = enc.rotate(q, k, long, long)
    want = RoPE(d, base=base).rotate(q, k, long, long)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # Back to a short sequence: the trained frequencies again (the cache follows the length).
    torch.testing.assert_close(
        enc.rotate(q[..., :32, :], k[..., :32, :], short, short),
        RoPE(d).rotate(q[..., :32, :], k[..., :32, :], short, short),
    )


# --- ReRoPE --------------------------------------------------------------------------------------


def _attention_by_hand(q, k, v, w, d):
    """softmax over j <= i of q_i . k_j where the pair is RoPE-rotated at relative min(i-j, w)."""
    plain = RoPE(d)
    s = q.shape[-2]
    out = torch.zeros_like(q)
    for i in range(s):
        scores = []
        for j in range(i + 1):
            rel = min(i - j, w)
            qi, kj = plain.rotate(
                q[..., i : i + 1, :], k[..., j : j + 1, :], torch.tensor([rel]), torch.tensor([0])
            )
            scores.append((qi * kj).sum(-1) / math.sqrt(d))
        probs = torch.cat(scores, dim=-1).softmax(-1)  # [b, h, i+1]
        out[..., i, :] = (probs.unsqueeze(-1) * v[..., : i + 1, :]).sum(-2)
    return out


def test_rerope_matches_the_definition():
    d, w = 8, 3
    enc = RoPE(d, scaling={"type": "rerope", "window": w}, train_length=8)
    assert enc.has_attend and not RoPE(d).has_attend
    gen = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(1, 2, 9, d, generator=gen) for _ in range(3))
    enc.rerope_block_size = 4  # several blocks
    pos = torch.arange(9)
    got = enc.attend(q, k, v, pos, pos)
    torch.testing.assert_close(got, _attention_by_hand(q, k, v, w, d), atol=1e-5, rtol=1e-5)


def test_rerope_with_a_wide_window_is_plain_rope():
    d = 8
    enc = RoPE(d, scaling={"type": "rerope", "window": 100}, train_length=16)
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 2, 20, d, generator=gen) for _ in range(3))
    pos = torch.arange(20)
    qr, kr = RoPE(d).rotate(q, k, pos, pos)
    want = F.scaled_dot_product_attention(qr, kr, v, is_causal=True)
    torch.testing.assert_close(enc.attend(q, k, v, pos, pos), want, atol=1e-5, rtol=1e-5)


def test_rerope_per_row_positions_apply_to_their_own_row():
    d = 8
    enc = RoPE(d, scaling={"type": "rerope", "window": 4}, train_length=8)
    gen = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(2, 2, 7, d, generator=gen) for _ in range(3))
    pos = torch.stack([torch.arange(7), torch.tensor([0, 2, 3, 7, 8, 9, 15])])
    out = enc.attend(q, k, v, pos, pos)
    for r in range(2):
        alone = enc.attend(q[r : r + 1], k[r : r + 1], v[r : r + 1], pos[r], pos[r])
        torch.testing.assert_close(out[r : r + 1], alone, atol=1e-6, rtol=1e-5)
    assert not torch.allclose(out[1], enc.attend(q, k, v, pos[0], pos[0])[1], atol=1e-4)


def test_rerope_in_the_model_uses_the_encodings_attention(make_tiny_model):
    plain = make_tiny_model("rope")
    wide = make_tiny_model("rope", "encoding.scaling.type=rerope", "encoding.scaling.window=100")
    narrow = make_tiny_model("rope", "encoding.scaling.type=rerope", "encoding.scaling.window=2")
    wide.load_state_dict(plain.state_dict())
    narrow.load_state_dict(plain.state_dict())
    tokens = torch.randint(50, (2, 24), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        torch.testing.assert_close(wide(tokens), plain(tokens), atol=1e-5, rtol=1e-5)
        assert not torch.allclose(narrow(tokens), plain(tokens), atol=1e-4)
        # Within the window nothing changes: the first 3 tokens only see distances <= 2.
        torch.testing.assert_close(narrow(tokens)[:, :3], plain(tokens)[:, :3], atol=1e-5, rtol=0)


def test_rerope_default_window_is_half_the_training_length():
    assert RopeScaling.from_config({"type": "rerope"}, 64).rerope_window == 32


# --- config, overrides and errors ----------------------------------------------------------------

TINY = ["model.d_model=32", "model.n_heads=4", "train.length=16"]


def test_eval_override_selects_yarn_with_training_length_as_original():
    cfg = apply_overrides(
        compose(["encoding=rope", *TINY]),
        ["encoding.scaling.type=yarn", "encoding.scaling.factor=4"],
    )
    enc = build_encoding(cfg)
    assert isinstance(enc, RoPE)
    assert enc.scaling.type == "yarn" and enc.scaling.factor == 4.0
    assert enc.scaling.original_length == 16
    assert enc.attn_scale == pytest.approx(0.1 * math.log(4) + 1)


def test_default_rope_is_unscaled():
    enc = build_encoding(compose(["encoding=rope", *TINY]))
    assert enc.scaling.type == "none" and enc.attn_scale == 1.0
    torch.testing.assert_close(enc._freq, enc.inv_freq)


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("encoding.scaling.type=yarm", "unknown RoPE scaling type 'yarm'"),
        ("encoding.scaling.factor=0.5", "factor must be >= 1"),
    ],
)
def test_bad_scaling_is_a_config_error(override, match):
    cfg = apply_overrides(
        compose(["encoding=rope", *TINY]), ["encoding.scaling.type=linear", override]
    )
    with pytest.raises(ConfigError, match=match):
        build_encoding(cfg)


def test_misspelled_scaling_key_is_a_config_error():
    with pytest.raises(ConfigError):
        apply_overrides(compose(["encoding=rope", *TINY]), ["encoding.scaling.fctor=4"])


def test_unknown_scaling_field_is_rejected_directly():
    with pytest.raises(ValueError, match="no parameter 'fctor'"):
        RoPE(8, scaling={"type": "linear", "fctor": 4})


def test_scaling_needs_an_original_length():
    with pytest.raises(ValueError, match="original_length"):
        RoPE(8, scaling={"type": "yarn", "factor": 4})


@pytest.mark.parametrize(
    ("node", "text"),
    [
        ({"factor": "four"}, "factor must be a number, got 'four'"),
        ({"type": "yarn", "factor": True, "original_length": 8}, "factor must be a number"),
        ({"type": "yarn", "beta_fast": "x", "original_length": 8}, "beta_fast must be a number"),
        ({"type": "rerope", "window": 2.5, "original_length": 8}, "window must be a whole"),
        ({"type": 3}, "type must be a name"),
    ],
)
def test_a_setting_of_the_wrong_type_is_refused_whatever_the_type(node, text):
    with pytest.raises(ValueError, match=text):
        RopeScaling.from_config(node, train_length=8)
