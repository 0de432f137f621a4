"""The encoding contract, checked for every ``configs/encoding/*.yaml`` (a new yaml is picked up
automatically): it builds, is causal, extrapolates or says why not, and treats positions
``None``, ``[s]`` and ``[b, s]`` alike."""

from __future__ import annotations

import pytest
import torch

from posx.config import CONFIG_DIR
from posx.encodings.base import PositionalEncoding

ENCODINGS = sorted(p.stem for p in (CONFIG_DIR / "encoding").glob("*.yaml"))
TRAIN_LEN = 16
BATCH = 2


def test_encoding_configs_are_discovered():
    assert {"nope", "rope", "alibi", "t5", "sinusoidal", "learned"} <= set(ENCODINGS)


@pytest.fixture(scope="module", params=ENCODINGS)
def model(request, make_tiny_model):
    torch.manual_seed(0)
    return make_tiny_model(request.param)


@pytest.fixture
def tokens(model):
    gen = torch.Generator().manual_seed(1)
    return torch.randint(model.head.out_features, (BATCH, TRAIN_LEN), generator=gen)


def test_builds_a_positional_encoding(model):
    assert isinstance(model.encoding, PositionalEncoding)
    for i in range(len(model.blocks)):
        assert isinstance(model.encoding.for_layer(i), PositionalEncoding)


@torch.no_grad()
@pytest.mark.parametrize("j", [1, 7, TRAIN_LEN - 1])
def test_causal(model, tokens, j):
    base = model(tokens)
    changed = tokens.clone()
    changed[:, j] = (changed[:, j] + 1) % model.head.out_features
    out = model(changed)
    torch.testing.assert_close(out[:, :j], base[:, :j], atol=1e-5, rtol=0)
    # The change must be visible from position j on, or the check above proves nothing.
    assert not torch.allclose(out[:, j:], base[:, j:], atol=1e-5)


@torch.no_grad()
def test_runs_at_4x_training_length_or_says_why_not(model, tokens):
    long = 4 * TRAIN_LEN
    reason = model.encoding.unsupported_reason(long)
    if reason is None:
        gen = torch.Generator().manual_seed(2)
        out = model(torch.randint(model.head.out_features, (BATCH, long), generator=gen))
        assert out.shape == (BATCH, long, model.head.out_features)
        assert torch.isfinite(out).all()
    else:
        assert isinstance(reason, str) and reason.strip()
        assert model.encoding.unsupported_reason(TRAIN_LEN) is None
        out = model(tokens)
        assert out.shape == (BATCH, TRAIN_LEN, model.head.out_features)
        assert torch.isfinite(out).all()


@torch.no_grad()
def test_explicit_positions_match_default(model, tokens):
    default = model(tokens)
    pos = torch.arange(TRAIN_LEN)
    shared = model(tokens, pos)
    per_row = model(tokens, pos.expand(BATCH, TRAIN_LEN))
    torch.testing.assert_close(shared, default, atol=1e-5, rtol=0)
    torch.testing.assert_close(per_row, default, atol=1e-5, rtol=0)
