"""Kernel choice, bounded blocks and blocked = unblocked = FlexAttention for every bias encoding.

The bias encodings are found by globbing configs/encoding/*.yaml and keeping those whose
encoding declares a bias, so a new bias encoding is covered without touching this file.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

from posx.build import build_encoding
from posx.config import CONFIG_DIR, compose
from posx.encodings import blocked
from posx.encodings.alibi import ALiBi
from posx.encodings.base import NoPE, PositionalEncoding
from posx.encodings.blocked import query_block
from posx.model import attention
from posx.model.attention import (
    FLEX_AVAILABLE,
    blocked_bias_attention,
    choose_kernel,
    flex_bias_attention,
    flex_ok,
)

B, H, S, D = 2, 4, 37, 16
DIMS = ["model.d_model=64", "model.n_heads=4", "model.n_layers=2", "train.length=16"]


def encoding_of(name: str) -> PositionalEncoding:
    """The last layer's encoding, as attention gets it (a per-layer owner's hooks need a layer)."""
    torch.manual_seed(0)
    enc = build_encoding(compose([f"encoding={name}", *DIMS]))
    with torch.no_grad():  # learned tables start near zero; make the bias matter
        for p in enc.parameters():
            p.normal_(std=1.0)
    return enc.for_layer(1)


def bias_encodings() -> list[str]:
    names = sorted(p.stem for p in (CONFIG_DIR / "encoding").glob("*.yaml"))
    return [n for n in names if encoding_of(n).has_bias]


BIAS = bias_encodings()
# FlexAttention's eager reference is slow on the CPU: the paper pair runs by default, the rest
# with the slow tests.
FLEX_CASES = [n if n in ("alibi", "t5") else pytest.param(n, marks=pytest.mark.slow) for n in BIAS]


def test_the_glob_finds_the_known_bias_encodings():
    assert {"alibi", "t5"} <= set(BIAS)


def qkv(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, S, D, generator=gen) for _ in range(3))


def positions(kind: str) -> torch.Tensor:
    if kind == "shared":
        return torch.arange(S)
    return torch.stack([torch.arange(S) + 50, torch.arange(S) * 3])  # per row, with gaps


@pytest.mark.parametrize("pos_kind", ["shared", "per_row"])
@pytest.mark.parametrize("name", BIAS)
def test_blocked_equals_unblocked(name, pos_kind):
    enc, pos = encoding_of(name), positions(pos_kind)
    q, k, v = qkv()
    with torch.no_grad():
        whole = blocked_bias_attention(q, k, v, pos, pos, enc.bias, block_size=S)
        for block in (1, 5, 16):
            got = blocked_bias_attention(q, k, v, pos, pos, enc.bias, block_size=block)
            torch.testing.assert_close(got, whole, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", BIAS)
def test_model_output_does_not_depend_on_the_block_size(name):
    from posx.build import build_model

    outs = []
    for block in (3, 4096):
        torch.manual_seed(0)
        cfg = compose([f"encoding={name}", *DIMS, f"model.attn_block_size={block}"])
        model = build_model(cfg, vocab_size=40).eval()
        with torch.no_grad():
            outs.append(model(torch.arange(29).remainder(40).unsqueeze(0)))
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not FLEX_AVAILABLE, reason="torch without FlexAttention")
@pytest.mark.parametrize("pos_kind", ["shared", "per_row"])
@pytest.mark.parametrize("name", FLEX_CASES)
def test_flex_score_mod_equals_blocked(name, pos_kind):
    """The CUDA kernel's score_mod, run by FlexAttention's eager reference on the CPU."""
    enc, pos = encoding_of(name), positions(pos_kind)
    # A bias that cannot be traced: CUDA uses the blocked kernel for it.
    if not flex_ok(enc, torch.device("cpu")):
        assert choose_kernel(enc, torch.device("cuda"), flex_available=True) == "blocked"
        return
    q, k, v = qkv(1)
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "called without torch.compile": intended here
        got = flex_bias_attention(q, k, v, pos, pos, enc.bias, compile=False)
        expected = blocked_bias_attention(q, k, v, pos, pos, enc.bias, block_size=8)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


class Attending(PositionalEncoding):
    def attend(self, q, k, v, q_pos, k_pos):
        return v


class Untraceable(ALiBi):
    """A bias with data-dependent Python (``int(tensor)``), which no score_mod can trace."""

    def bias(self, q_pos, k_pos):
        return super().bias(q_pos, k_pos) * int(q_pos.max() >= 0)


def test_flex_probe():
    cpu = torch.device("cpu")
    assert flex_ok(ALiBi(4), cpu) == FLEX_AVAILABLE
    assert not flex_ok(Untraceable(4), cpu)
    assert choose_kernel(Untraceable(4), torch.device("cuda"), flex_available=True) == "blocked"


def test_kernel_choice(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    # The flex probe runs on the attention's device (a per-layer view holds no tensor to tell
    # it); recorded, not run, since this machine may have no CUDA device.
    probed = []
    monkeypatch.setattr(attention, "_probe_flex", lambda enc, dev: probed.append(dev) or True)
    assert choose_kernel(NoPE(), cuda) == "sdpa"
    assert choose_kernel(Attending(), cuda) == "attend"
    assert choose_kernel(ALiBi(4), cpu, flex_available=True) == "blocked"  # CPU flex: no grads
    assert choose_kernel(ALiBi(4), cuda, flex_available=True) == "flex"
    assert choose_kernel(ALiBi(4), cuda, flex_available=False) == "blocked"
    monkeypatch.setenv("POSX_ATTENTION", "blocked")
    assert choose_kernel(ALiBi(4), cuda, flex_available=True) == "blocked"
    assert probed == [cuda]


def test_causal_attention_dispatches_on_the_choice(monkeypatch):
    calls = []
    monkeypatch.setattr(attention, "choose_kernel", lambda enc, dev: "flex")
    monkeypatch.setattr(
        attention, "flex_bias_attention", lambda q, k, v, qp, kp, fn: calls.append(fn) or q
    )
    q, k, v = qkv()
    enc = ALiBi(H)
    assert attention.causal_attention(q, k, v, torch.arange(S), torch.arange(S), enc) is q
    assert calls == [enc.bias]


def test_query_block_keeps_one_block_under_the_budget():
    budget = blocked.MAX_BLOCK_ELEMENTS
    assert query_block(256, 8, 4, 64) == 256  # short sequences: the configured block
    for keys in (4096, 16384, 32768, 10**6):
        block = query_block(256, 1, 4, keys)
        assert block * 4 * keys <= budget or block == 1
    assert query_block(256, 1, 4, 32768) == budget // (4 * 32768)


def test_no_block_exceeds_the_budget_at_long_lengths(monkeypatch):
    """With a small budget, a long sequence's largest bias stays within it: memory linear in s."""
    monkeypatch.setattr(blocked, "MAX_BLOCK_ELEMENTS", 4 * 8 * 64)  # 8 queries x 64 keys
    enc, sizes = ALiBi(4), []

    def spy(qp, kp):
        out = enc.bias(qp, kp)
        sizes.append(out.numel())
        return out

    s = 64
    q, k, v = (torch.randn(1, 4, s, 8) for _ in range(3))
    pos = torch.arange(s)
    got = blocked_bias_attention(q, k, v, pos, pos, spy, block_size=256)
    assert max(sizes) <= 4 * 8 * 64 and len(sizes) == 8
    ref = F.scaled_dot_product_attention(
        q, k, v, enc.bias(pos, pos).masked_fill(torch.ones(s, s).triu(1).bool(), float("-inf"))
    )
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


PROBE = """
import torch
from posx.encodings.alibi import ALiBi
from posx.evaluation.memory import PeakMemory
from posx.model.attention import blocked_bias_attention
torch.set_num_threads(1)
s = 16384
x = torch.randn(1, s, 3 * 64)
q, k, v = x.view(1, s, 3, 4, 16).permute(2, 0, 3, 1, 4)  # as the model makes them
pos = torch.arange(s)
with torch.inference_mode(), PeakMemory(torch.device("cpu")) as mem:
    blocked_bias_attention(q, k, v, pos, pos, ALiBi(4).bias, 256)
print(mem.delta_mb)
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_first_long_call_does_not_balloon_the_process():
    """A fresh process's first 16k-token biased attention stays near its live tensors (a few
    16 MiB blocks); growing blocks made the C heap hold 0.5-1 GiB of freed chunks."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    assert float(out.stdout.strip()) < 300, out.stdout
