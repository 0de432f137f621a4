"""FIRE's FlexAttention score_mods equal its bias, pair by pair, on the CPU.

On CUDA FIRE runs in FlexAttention (its bias reads the query's own position, so no
per-distance table stands for it): the MLP unrolled where a gradient flows, its
piecewise-linear form (a binary search among the kinks) where none does. Both are evaluated
here on index grids (their indexing broadcasts) against ``bias``; attention through them is in
tests/unit/model/test_attention_kernels.py (dense, eager FlexAttention and compiled).
"""

from __future__ import annotations

import pytest
import torch

from posx.encodings.fire import FIRE
from posx.kernels.flex.mods import LogDistance, piecewise_score_mod
from tests.unit.encodings.test_fire_piecewise import _fire as random_fire


def _fire(seed: int, width: int = 16) -> FIRE:
    """test_fire_piecewise's random FIRE, with a threshold of its own per layer as well."""
    enc = random_fire(seed, width=width)
    gen = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        enc.threshold_mult.copy_(torch.rand(enc.threshold_mult.shape, generator=gen) + 0.5)
    return enc


def on_grid(score_mod, pos: torch.Tensor, heads: int) -> torch.Tensor:
    """``score_mod`` of a zero score at every (row, head, query, key): ``[b, h, s, s]``."""
    rows = pos.shape[0] if pos.dim() == 2 else 1
    b, h, s = (torch.arange(n) for n in (rows, heads, pos.shape[-1]))
    grid = (b[:, None, None, None], h[None, :, None, None])
    grid += (s[None, None, :, None], s[None, None, None, :])
    return score_mod(torch.zeros(()), *grid)


POSITIONS = {
    "consecutive": torch.arange(200),
    "past the threshold, with gaps": torch.arange(60) * 7 + 3,
    "per row": torch.stack((torch.arange(40), torch.arange(40) * 3 + 90)),
}


@pytest.mark.parametrize("grad", [True, False], ids=["mlp", "piecewise"])
@pytest.mark.parametrize("width", [1, 5, 16])
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("pos", POSITIONS.values(), ids=POSITIONS.keys())
def test_score_mod_equals_the_bias(pos, seed, width, grad):
    enc = _fire(seed, width=width)
    layer = enc.for_layer(1)
    with torch.set_grad_enabled(grad):
        got = on_grid(layer.score_mod(pos, pos), pos, enc.n_heads)
    with torch.no_grad():
        expected = layer.bias(pos, pos)
    expected = expected if expected.dim() == 4 else expected.unsqueeze(0)
    torch.testing.assert_close(got.detach(), expected, atol=2e-5, rtol=2e-5)
    assert got.requires_grad == grad  # the MLP form keeps the parameters' autograd history


def test_the_piecewise_search_counts_the_kinks_below_x():
    """Ties go left (``searchsorted``'s default, as the eager evaluation takes the segment),
    kinks that never turn (``inf``) are never below, and every segment is reached."""
    kinks = torch.tensor([-1.0, 0.25, 0.5, 0.5, 2.0, torch.inf])
    slopes = torch.zeros(1, 7)
    intercepts = torch.arange(7.0).unsqueeze(0)  # the segment's index
    xs = torch.tensor([0.0, 0.1, 0.2, 0.25, 0.3, 0.5, 0.6, 2.0, 5.0, 50.0])
    # x as the positions' normalised distance: norm 1 and c such that log(c d + 1) = x
    x = LogDistance(xs.expm1().clamp(min=0), torch.zeros(1), torch.tensor(1.0), torch.ones(10))
    mod = piecewise_score_mod(x, kinks, slopes, intercepts)
    q = torch.arange(10)
    got = mod(torch.zeros(()), torch.zeros((), dtype=torch.long), torch.zeros_like(q), q, 0 * q)
    reached = torch.log(torch.abs(xs.expm1().clamp(min=0)) + 1)
    torch.testing.assert_close(got, torch.searchsorted(kinks, reached).float())
    assert got.tolist() == [1, 1, 1, 1, 2, 2, 4, 4, 5, 5]  # 0.25, 0.5, 2.0 on kinks: left


def test_a_unit_that_never_turns_and_distances_on_a_kink():
    enc = _fire(0, width=4)
    with torch.no_grad():
        enc.w1[1] = torch.tensor([0.0, 2.0, -1.0, 0.5])
        enc.b1[1] = torch.tensor([0.3, -1.0, 0.5, 0.0])  # kinks 0.5, 0.5 and 0.0
    pos = torch.arange(120)
    with torch.no_grad():
        got = on_grid(enc.for_layer(1).score_mod(pos, pos), pos, enc.n_heads)
        expected = enc.for_layer(1).bias(pos, pos).unsqueeze(0)
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=2e-5)


def test_a_shared_fire_has_one_score_mod_and_views_forward_theirs():
    shared = FIRE(n_heads=2, n_layers=3, per_layer=False, train_length=8)
    assert shared.has_score_mod and shared.for_layer(2) is shared
    pos = torch.arange(9)
    with torch.no_grad():
        torch.testing.assert_close(
            on_grid(shared.score_mod(pos, pos), pos, 2), shared.bias(pos, pos).unsqueeze(0)
        )
    per_layer = _fire(1)
    with pytest.raises(RuntimeError, match="call for_layer"):
        per_layer.score_mod(pos, pos)
    assert per_layer.for_layer(0).has_score_mod
