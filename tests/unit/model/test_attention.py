"""Attention kernels against a reference computed by hand: full [s, s] scores + bias + causal
mask + softmax."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from posx.config.compose import CONFIG_DIR
from posx.encodings.alibi import ALiBi
from posx.encodings.base import NoPE
from posx.encodings.rope import RoPE
from posx.encodings.t5 import T5Bias
from posx.kernels.bias import blocked_bias_attention
from posx.model.attention import causal_attention

B, H, S, D = 2, 4, 19, 8


def qkv(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, S, D, generator=gen) for _ in range(3))


def reference(q, k, v, bias=None):
    """softmax(q k^T / sqrt(d) + bias, masked causally) v, with the full s x s matrix."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias
    s = q.shape[-2]
    future = torch.ones(s, s, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(future, float("-inf"))
    return scores.softmax(dim=-1) @ v


def positions(kind):
    if kind == "shared":
        return torch.arange(S)
    # Per-row positions that differ between rows: an offset and sorted random gaps.
    gen = torch.Generator().manual_seed(5)
    gaps = torch.randint(1, 4, (S,), generator=gen)
    return torch.stack([torch.arange(S) + 100, gaps.cumsum(0)])


def make_encoding(name):
    torch.manual_seed(0)
    if name == "alibi":
        return ALiBi(H)
    enc = T5Bias(H, num_buckets=8, max_distance=16)  # small buckets so distances matter
    with torch.no_grad():
        enc.table.weight.normal_(std=1.0)
    return enc


@pytest.mark.parametrize("pos_kind", ["shared", "per_row"])
@pytest.mark.parametrize("name", ["alibi", "t5"])
@pytest.mark.parametrize("block", [1, 3, 7, 64])
def test_blocked_bias_attention_matches_reference(block, name, pos_kind):
    enc = make_encoding(name)
    q, k, v = qkv()
    pos = positions(pos_kind)
    full_bias = enc.bias(pos, pos)  # [h, s, s] or [b, h, s, s]
    expected = reference(q, k, v, full_bias)
    with torch.no_grad():
        got = blocked_bias_attention(q, k, v, pos, pos, enc.bias, block_size=block)
    assert got.shape == (B, H, S, D)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_blocked_bias_by_hand_alibi_slopes():
    """The ALiBi bias written out here, not taken from ALiBi.bias."""
    q, k, v = qkv(1)
    pos = torch.arange(S)
    slopes = torch.tensor([2.0 ** (-2 * (h + 1)) for h in range(H)])
    dist = (pos[:, None] - pos[None, :]).float()
    bias = -slopes[:, None, None] * dist
    expected = reference(q, k, v, bias)
    got = blocked_bias_attention(q, k, v, pos, pos, ALiBi(H).bias, block_size=4)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_blocked_bias_attention_calls_bias_per_block():
    enc = ALiBi(H)
    calls = []

    def bias_fn(qp, kp):
        calls.append((qp.tolist(), kp.shape[-1]))
        return enc.bias(qp, kp)

    q, k, v = qkv()
    blocked_bias_attention(q, k, v, torch.arange(S), torch.arange(S), bias_fn, block_size=7)
    # largest block first (the allocator then reuses its memory for the smaller ones)
    assert [c[0][0] for c in calls] == [14, 7, 0]
    assert [len(c[0]) for c in calls] == [5, 7, 7]
    assert [c[1] for c in calls] == [19, 14, 7]  # each block sees only the keys up to its end


def test_blocked_bias_attention_rejects_bad_block_size():
    q, k, v = qkv()
    with pytest.raises(ValueError):
        blocked_bias_attention(q, k, v, torch.arange(S), torch.arange(S), ALiBi(H).bias, 0)


def test_causal_attention_nope_is_plain_causal_sdpa():
    q, k, v = qkv(2)
    pos = torch.arange(S)
    got = causal_attention(q, k, v, pos, pos, NoPE())
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    torch.testing.assert_close(got, reference(q, k, v), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("block", [1, 5, 256])
def test_causal_attention_with_bias_matches_reference(block):
    enc = make_encoding("alibi")
    q, k, v = qkv(3)
    pos = torch.arange(S)
    got = causal_attention(q, k, v, pos, pos, enc, block_size=block)
    torch.testing.assert_close(got, reference(q, k, v, enc.bias(pos, pos)), atol=1e-5, rtol=1e-5)


def test_causal_attention_with_rope_matches_reference():
    enc = RoPE(head_dim=D)
    q, k, v = qkv(4)
    pos = torch.arange(S)
    qr, kr = enc.rotate(q, k, pos, pos)
    got = causal_attention(q, k, v, pos, pos, enc)
    torch.testing.assert_close(got, reference(qr, kr, v), atol=1e-5, rtol=1e-5)


# --- reuse of position-derived tensors (PositionMemo) ------------------------------------------

# Every encoding yaml (a new one is checked without editing this list): a table or bias cached
# from positions must go stale when the parameters it reads change.
MEMO_ENCODINGS = sorted(p.stem for p in (CONFIG_DIR / "encoding").glob("*.yaml"))


def test_every_encoding_yaml_is_checked_for_stale_caches():
    assert {"rope", "alibi_learned", "kerple_log", "fire", "cope", "sinusoidal"} <= set(
        MEMO_ENCODINGS
    )


@pytest.mark.parametrize("encoding", MEMO_ENCODINGS)
def test_cached_tables_and_biases_track_training(encoding, make_tiny_model):
    """Across optimizer steps, gradient accumulation and an inference-mode eval, a model with
    its caches warm computes exactly what a freshly built copy (empty caches) computes."""
    torch.manual_seed(0)
    model = make_tiny_model(encoding).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    tokens = torch.randint(0, 50, (2, 16))
    for _ in range(2):
        for _ in range(2):  # two backward passes before a step: grads accumulate
            model(tokens).logsumexp(-1).mean().backward()
        opt.step()
        opt.zero_grad()
        with torch.inference_mode():
            model(tokens)
    fresh = make_tiny_model(encoding).train()
    fresh.load_state_dict(model.state_dict())
    with torch.inference_mode():  # the cache from before the last step must not be used
        torch.testing.assert_close(model(tokens), fresh(tokens), atol=1e-6, rtol=1e-6)
    out, want = model(tokens), fresh(tokens)
    torch.testing.assert_close(out, want, atol=1e-6, rtol=1e-6)
    out.sum().backward()
    want.sum().backward()
    for (name, p), q in zip(model.named_parameters(), fresh.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-5, msg=name)
