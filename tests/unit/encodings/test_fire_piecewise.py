"""FIRE's evaluation bias (its MLP as a piecewise-linear function) equals the MLP.

The MLP of one scalar, ``W2 relu(w1 x + b1) + b2``, is linear between its hidden units' kinks;
without a gradient FIRE evaluates it that way (one search and two reads per pair and head
instead of a ``width``-wide hidden layer). These tests compare it with the MLP as written
(``mlp_bias``, what ``layer_bias`` computed before), pair by pair and through attention.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from posx.encodings import fire
from posx.encodings.base import add_head_dim
from posx.encodings.fire import FIRE
from posx.model.attention import causal_attention


def mlp_bias(enc: FIRE, q_pos, k_pos, layer: int) -> torch.Tensor:
    """The former ``FIRE.layer_bias``: the MLP over every pair."""
    x = enc.normalized_distance(q_pos, k_pos, layer).unsqueeze(-1)
    hidden = F.relu(x * enc.w1[layer] + enc.b1[layer])
    return add_head_dim(F.linear(hidden, enc.w2[layer], enc.b2[layer]))


def _fire(seed: int, heads: int = 3, width: int = 16, threshold: float = 20.0) -> FIRE:
    gen = torch.Generator().manual_seed(seed)
    enc = FIRE(n_heads=heads, n_layers=2, width=width, init_threshold=threshold)
    with torch.no_grad():
        for p in (enc.w1, enc.b1, enc.w2, enc.b2):
            p.copy_(torch.randn(p.shape, generator=gen))
        enc.c.copy_(torch.rand(enc.c.shape, generator=gen) + 0.05)
    return enc


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    "pos",
    [
        torch.arange(300),
        torch.arange(50) * 7 + 3,
        torch.stack((torch.arange(40), torch.arange(40) + 90)),
    ],
)
def test_piecewise_bias_equals_the_mlp(seed, pos):
    enc = _fire(seed)
    with torch.no_grad():
        got = enc.for_layer(1).bias(pos, pos)
    expected = mlp_bias(enc, pos, pos, 1).detach()
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_units_that_never_turn_and_inputs_on_a_kink():
    """A unit with ``w1 = 0`` (constant), and distances landing exactly on kinks."""
    enc = _fire(0, width=4)
    with torch.no_grad():
        enc.w1[0] = torch.tensor([0.0, 2.0, -1.0, 0.5])
        enc.b1[0] = torch.tensor([0.3, -1.0, 0.25, 0.0])
    x = torch.tensor([[0.0, 0.25, 0.5, 0.7, 1.0, 2.0]])
    got = enc._piecewise_bias(x, 0)
    hidden = F.relu(x.unsqueeze(-1) * enc.w1[0] + enc.b1[0])
    expected = add_head_dim(F.linear(hidden, enc.w2[0], enc.b2[0])).detach()
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)


def test_training_keeps_the_mlp_and_its_gradient():
    enc = _fire(1)
    pos = torch.arange(30)
    bias = enc.for_layer(0).bias(pos, pos)
    assert bias.requires_grad
    torch.testing.assert_close(bias, mlp_bias(enc, pos, pos, 0))


@pytest.mark.parametrize("block", [8, 256])
def test_attention_without_gradient_equals_attention_with_the_mlp(block):
    enc = _fire(2, heads=2)
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 70, 8, generator=gen) for _ in range(3))
    pos = torch.arange(70) + 5
    layer = enc.for_layer(0)
    with torch.no_grad():
        got = causal_attention(q, k, v, pos, pos, layer, block_size=block, kernel="blocked")
    expected = causal_attention(q, k, v, pos, pos, layer, block_size=block, kernel="blocked")
    torch.testing.assert_close(got, expected.detach(), atol=1e-5, rtol=1e-5)


def test_evaluation_builds_no_hidden_layer(monkeypatch):
    """Without a gradient the MLP's ``[pairs, width]`` hidden layer is never built (the former
    code ran it for every pair; this fails with it)."""
    enc = _fire(3)
    monkeypatch.setattr(fire.F, "relu", lambda *a: pytest.fail("the MLP ran per pair"))
    with torch.no_grad():
        enc.for_layer(0).bias(torch.arange(20), torch.arange(20))
