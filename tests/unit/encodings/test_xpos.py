"""xPos (Sun et al. 2022): golden values from the paper's formula, computed here by hand."""

from __future__ import annotations

import math

import pytest
import torch

from posx.encodings.rope import RoPE
from posx.encodings.xpos import XPos


def _qk(d: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(1, 1, 1, d, generator=gen), torch.randn(1, 1, 1, d, generator=gen)


def _score(enc, q, k, n, m) -> float:
    dtype = torch.float32 if isinstance(n, float) else torch.long
    qr, kr = enc.rotate(q, k, torch.tensor([n], dtype=dtype), torch.tensor([m], dtype=dtype))
    return (qr * kr).sum().item()


def test_zeta_matches_the_paper():
    d = 8
    enc = XPos(head_dim=d)
    want = [(2 * k + 0.4 * d) / (1.4 * d) for k in range(d // 2)]
    assert want == pytest.approx([3.2 / 11.2, 5.2 / 11.2, 7.2 / 11.2, 9.2 / 11.2])
    assert enc.log_zeta.exp().tolist() == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize(("n", "m"), [(5, 2), (300, 100), (1000, 0), (7, 7)])
def test_score_by_hand(n, m):
    """q_n . k_m = sum_k zeta_k^((n - m)/gamma) (rotated pair k of q) . (rotated pair k of k)."""
    d, gamma = 8, 512.0
    q, k = _qk(d, seed=n)
    x, y = q.flatten().tolist(), k.flatten().tolist()
    want = 0.0
    for i in range(d // 2):
        a, b = 2 * i, 2 * i + 1  # pair i: adjacent dimensions, as in the paper
        zeta = (2 * i + 0.4 * d) / (1.4 * d)
        theta = (n - m) * 10000 ** (-2 * i / d)  # the pair's relative rotation
        # R(n t) x . R(m t) y = x . R(-(n - m) t) y
        dot = (x[a] * y[a] + x[b] * y[b]) * math.cos(theta) + (
            x[a] * y[b] - x[b] * y[a]
        ) * math.sin(theta)
        want += zeta ** ((n - m) / gamma) * dot
    assert _score(XPos(d, gamma=gamma), q, k, n, m) == pytest.approx(want, rel=1e-4, abs=1e-5)


def test_score_depends_only_on_offset():
    enc = XPos(16)
    q, k = _qk(16, seed=1)
    ref = _score(enc, q, k, 9, 2)
    assert _score(enc, q, k, 2009, 2002) == pytest.approx(ref, rel=1e-4)
    assert _score(enc, q, k, 9.0, 2.0) == pytest.approx(ref, rel=1e-4)
    assert _score(enc, q, k, 9, 1) != pytest.approx(ref, rel=1e-4)


def test_decay_relative_to_rope_is_the_zeta_factor():
    """With one rotating pair the xPos/RoPE score ratio is exactly zeta_0^((n - m)/gamma)."""
    d, gamma = 16, 64.0
    q = torch.zeros(1, 1, 1, d)
    k = torch.zeros(1, 1, 1, d)
    q[..., 0], k[..., 0] = 1.0, 1.0  # pair 0 only
    for n, m in [(10, 0), (200, 100), (64, 0)]:
        ratio = _score(XPos(d, gamma=gamma), q, k, n, m) / _score(RoPE(d), q, k, n, m)
        assert ratio == pytest.approx((0.4 / 1.4) ** ((n - m) / gamma), rel=1e-4)


def test_long_positions_stay_finite_and_the_limit_is_reported():
    enc = XPos(16)
    pos = torch.arange(0, 60000, 97)
    q = torch.randn(1, 1, pos.shape[0], 16)
    qr, kr = enc.rotate(q, q, pos, pos)
    assert torch.isfinite(qr).all() and torch.isfinite(kr).all()
    limit = int(2 * 512 * 80 / math.log(1.4 / 0.4))
    assert enc.max_length() == limit
    assert enc.unsupported_reason(limit) is None
    reason = enc.unsupported_reason(limit + 1)
    assert reason and "xPos" in reason


def test_rejects_bad_gamma():
    with pytest.raises(ValueError, match="gamma"):
        XPos(8, gamma=0.0)
