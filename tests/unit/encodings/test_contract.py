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


def uses_positions(encoding: PositionalEncoding) -> bool:
    """Whether the encoding overrides any hook of the contract (NoPE overrides none)."""
    hooks = ("embed", "rotate", "bias", "attend")
    return any(getattr(type(encoding), h) is not getattr(PositionalEncoding, h) for h in hooks)


def test_encoding_configs_are_discovered():
    assert {"nope", "rope", "alibi", "t5", "sinusoidal", "learned"} <= set(ENCODINGS)


@pytest.fixture(scope="module", params=ENCODINGS)
def encoding_name(request):
    return request.param


@pytest.fixture(scope="module")
def model(encoding_name, make_tiny_model):
    torch.manual_seed(0)
    return make_tiny_model(encoding_name)


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


@torch.no_grad()
def test_per_row_positions_apply_to_their_own_row(model):
    """Randomized positions (sorted, from [0, train length)) differ per row; each row's output
    equals running that row alone with its own ``[s]`` positions."""
    gen = torch.Generator().manual_seed(3)
    s = TRAIN_LEN // 2
    tokens = torch.randint(model.head.out_features, (BATCH, s), generator=gen)
    pos = torch.stack(
        [torch.randperm(TRAIN_LEN, generator=gen)[:s].sort().values for _ in range(BATCH)]
    )
    assert not torch.equal(pos[0], pos[1])
    out = model(tokens, pos)
    for r in range(BATCH):
        alone = model(tokens[r : r + 1], pos[r])
        torch.testing.assert_close(out[r : r + 1], alone, atol=1e-5, rtol=0)
    if uses_positions(model.encoding):
        # Uneven gaps change every encoding that reads positions, relative ones included.
        assert not torch.allclose(out, model(tokens), atol=1e-5)


@torch.no_grad()
def test_attention_block_size_does_not_change_outputs(
    model, tokens, encoding_name, make_tiny_model
):
    """The model's blocked attention path gives the same logits for any query block size."""
    small = make_tiny_model(encoding_name, "model.attn_block_size=3").eval()
    small.load_state_dict(model.state_dict())
    torch.testing.assert_close(small(tokens), model(tokens), atol=1e-5, rtol=0)
