"""Kernel choice, bounded blocks and blocked = unblocked = FlexAttention for every bias encoding.

The bias encodings are found by globbing configs/encoding/*.yaml and keeping those whose
encoding declares a bias, so a new bias encoding is covered without touching this file. Every
layer's encoding is checked (per-layer parameters give each layer its own bias).

FlexAttention on the CPU: PyTorch runs its forward (compiled, or the unfused reference) but
refuses its backward (``FlexAttention does not support backward on CPU``). Gradients are checked
by evaluating posx's ``score_mod`` densely (its indexing broadcasts), which is the function
FlexAttention differentiates on CUDA.
"""

from __future__ import annotations

import math
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

from posx.config.build import build_encoding, build_model
from posx.config.compose import CONFIG_DIR
from posx.encodings.alibi import ALiBi
from posx.encodings.base import NoPE, PositionalEncoding
from posx.encodings.fire import FIRE
from posx.kernels import bias as bias_kernel
from posx.kernels import budget as budgets
from posx.kernels import relative
from posx.kernels.bias import blocked_bias_attention
from posx.kernels.budget import query_block
from posx.kernels.flex.attention import (
    FLEX_AVAILABLE,
    distance_table,
    flex_bias_attention,
    flex_score_mod,
    flex_unsupported_reason,
)
from posx.model import attention
from posx.model.attention import KERNELS, choose_kernel
from tests.conftest import composed

B, H, S, D = 2, 4, 37, 16
N_LAYERS = 2
DIMS = ["model.d_model=64", "model.n_heads=4", f"model.n_layers={N_LAYERS}", "train.length=16"]
CPU, CUDA = torch.device("cpu"), torch.device("cuda")
needs_flex = pytest.mark.skipif(not FLEX_AVAILABLE, reason="torch without FlexAttention")


def encoding_of(name: str, layer: int = N_LAYERS - 1) -> PositionalEncoding:
    """Layer ``layer``'s encoding of ``configs/encoding/NAME.yaml``, with its parameters drawn
    at std 1 (learned tables start near zero, where any bias would pass)."""
    torch.manual_seed(0)
    enc = build_encoding(composed([f"encoding={name}", *DIMS]))
    with torch.no_grad():
        for p in enc.parameters():
            p.normal_(std=1.0)
    return enc.for_layer(layer)


def bias_encodings() -> list[str]:
    names = sorted(p.stem for p in (CONFIG_DIR / "encoding").glob("*.yaml"))
    return [n for n in names if encoding_of(n).has_bias]


BIAS = bias_encodings()
FLEX = [n for n in BIAS if flex_unsupported_reason(encoding_of(n)) is None]
NOT_FLEX = [n for n in BIAS if n not in FLEX]
# FlexAttention reads these from a per-distance table; the others give their own score_mod
TABLE = [n for n in FLEX if encoding_of(n).relative_bias and not encoding_of(n).has_score_mod]


def own_score_mod(enc: PositionalEncoding, pos: torch.Tensor):
    """The encoding's own score_mod, as causal_attention takes it (None: the distance table)."""
    return enc.score_mod(pos, pos) if enc.has_score_mod else None


class QueryScaled(PositionalEncoding):
    """A bias of the query's position and the distance, with no score_mod of its own."""

    def bias(self, q_pos, k_pos):
        return (q_pos.unsqueeze(-1) * 0.01 - (q_pos.unsqueeze(-1) - k_pos)).unsqueeze(0)


def test_the_glob_finds_the_known_bias_encodings():
    assert {"alibi", "t5"} <= set(BIAS)


def test_which_bias_encodings_take_flex_attention():
    """The list the docs give: every bias of the distance alone runs in FlexAttention from a
    per-distance table, except alibi, computed per pair (measured faster on an H200); FIRE
    (normalised by the query's own position) through its own score_mod; a bias with neither
    keeps the blocked kernel, saying why."""
    assert set(TABLE) == {
        "alibi_learned",
        "dynamic_bias",
        "kerple_log",
        "kerple_power",
        "sandwich",
        "t5",
    }
    assert set(FLEX) == {*TABLE, "alibi", "fire"} and NOT_FLEX == []
    assert encoding_of("fire").has_score_mod and encoding_of("alibi").has_score_mod
    assert not encoding_of("t5").has_score_mod
    reason = flex_unsupported_reason(QueryScaled(), flex_available=True)
    assert "q - k alone" in reason and "no score_mod of its own" in reason


@pytest.mark.parametrize("name", BIAS)
def test_relative_bias_declarations_are_true(name):
    """``relative_bias`` is what lets a per-distance table stand for the bias: it must hold
    (shifting both positions changes nothing), and an encoding without it must really depend
    on more than the distance (else it misses FlexAttention for nothing)."""
    enc = encoding_of(name)
    gen = torch.Generator().manual_seed(2)
    q = torch.randint(0, 3000, (9,), generator=gen)
    k = torch.randint(0, 3000, (11,), generator=gen)
    with torch.no_grad():
        base = enc.bias(q, k)
        moved = [enc.bias(q + shift, k + shift) for shift in (1, 517, 40000)]
    same = all(torch.allclose(m, base, atol=1e-5, rtol=1e-5) for m in moved)
    assert same == enc.relative_bias


def qkv(seed: int = 0, grad: bool = False, model_layout: bool = False) -> tuple[torch.Tensor, ...]:
    """``[B, H, S, D]`` each; with ``model_layout``, views of one ``[B, S, 3, H, D]`` tensor as
    the model makes them (the compiled kernel tests and the model then share one compilation:
    Inductor specialises on strides)."""
    gen = torch.Generator().manual_seed(seed)
    if model_layout:
        return tuple(torch.randn(B, S, 3, H, D, generator=gen).permute(2, 0, 3, 1, 4))
    return tuple(torch.randn(B, H, S, D, generator=gen).requires_grad_(grad) for _ in range(3))


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


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("name", TABLE)
def test_consecutive_positions_read_blocks_from_the_distance_table(name, grad):
    """A bias of the distance alone, at consecutive positions (per row too), is evaluated once
    per non-negative distance (not once per pair of every block) and gives the per-pair
    kernel's result and gradients; negative (future) distances never reach the bias."""
    enc = encoding_of(name)
    rows = torch.stack([torch.arange(S) + 50, torch.arange(S) + 3])
    seen: list[torch.Tensor] = []

    def spy(qp: torch.Tensor, kp: torch.Tensor) -> torch.Tensor:
        seen.append(qp.unsqueeze(-1) - kp.unsqueeze(-2))
        return enc.bias(qp, kp)

    for pos in (torch.arange(S), rows):
        want_q, got_q = (qkv(seed=3, grad=grad) for _ in range(2))
        with torch.set_grad_enabled(grad):
            want = blocked_bias_attention(*want_q, pos, pos, enc.bias, block_size=5)
            seen.clear()
            got = blocked_bias_attention(*got_q, pos, pos, spy, block_size=5, relative=True)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        assert sum(d.numel() for d in seen) == S and min(int(d.min()) for d in seen) == 0
        if grad:
            want.square().sum().backward()
            got.square().sum().backward()
            for w, g in zip(want_q, got_q, strict=True):
                torch.testing.assert_close(g.grad, w.grad, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", TABLE)
def test_other_positions_keep_the_per_pair_bias(name):
    enc = encoding_of(name)
    calls = []

    def spy(qp: torch.Tensor, kp: torch.Tensor) -> torch.Tensor:
        calls.append((qp.shape, kp.shape))
        return enc.bias(qp, kp)

    pos = positions("per_row")  # gaps in the second row
    q, k, v = qkv()
    with torch.no_grad():
        got = blocked_bias_attention(q, k, v, pos, pos, spy, block_size=5, relative=True)
        want = blocked_bias_attention(q, k, v, pos, pos, enc.bias, block_size=5)
    torch.testing.assert_close(got, want)
    assert len(calls) == math.ceil(S / 5)


def test_distance_block_is_the_toeplitz_block():
    s = 7
    table = torch.stack([torch.arange(s - 1, -s, -1.0), torch.arange(s - 1, -s, -1.0) * 10])
    for i0, i1 in [(0, 7), (3, 7), (2, 5), (0, 1), (6, 7)]:
        block = relative.distance_block(table, i0, i1)
        want = (torch.arange(i0, i1).unsqueeze(-1) - torch.arange(i1)).float()
        assert block.is_contiguous()
        torch.testing.assert_close(block, torch.stack([want, want * 10]))


@pytest.mark.parametrize("name", BIAS)
def test_model_output_does_not_depend_on_the_block_size(name):
    outs = []
    for block in (3, 4096):
        torch.manual_seed(0)
        cfg = composed([f"encoding={name}", *DIMS, f"model.attn_block_size={block}"])
        model = build_model(cfg, vocab_size=40).eval()
        with torch.no_grad():
            outs.append(model(torch.arange(29).remainder(40).unsqueeze(0)))
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pos_kind", ["shared", "per_row", "descending"])
@pytest.mark.parametrize("name", TABLE)
def test_distance_table_is_the_bias(name, pos_kind):
    """Every (query, key) pair's table entry is its bias, negative distances included."""
    enc = encoding_of(name)
    pos = positions(pos_kind) if pos_kind != "descending" else torch.arange(S).flip(0) * 2
    with torch.no_grad():
        table, lowest = distance_table(pos, pos, enc.bias)
        dist = pos.unsqueeze(-1) - pos.unsqueeze(-2)  # [(b,) s, s]
        looked_up = table[:, dist - lowest]  # [h, (b,) s, s]
        expected = enc.bias(pos, pos)
    if dist.dim() == 3:
        looked_up = looked_up.movedim(0, 1)
    torch.testing.assert_close(looked_up, expected.expand_as(looked_up), atol=1e-5, rtol=1e-5)
    assert table.shape[-1] & (table.shape[-1] - 1) == 0  # a power of two: fewer recompiles


@needs_flex
@pytest.mark.parametrize("pos_kind", ["shared", "per_row"])
@pytest.mark.parametrize("name", FLEX)
def test_flex_reference_equals_blocked(name, pos_kind):
    """FlexAttention's unfused reference with posx's score_mod, against the blocked kernel."""
    enc, pos = encoding_of(name), positions(pos_kind)
    q, k, v = qkv(1)
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "called without torch.compile": intended here
        mod = own_score_mod(enc, pos)
        got = flex_bias_attention(q, k, v, pos, pos, enc.bias, compile=False, score_mod=mod)
        expected = blocked_bias_attention(q, k, v, pos, pos, enc.bias, block_size=8)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


# FIRE's own score_mod (an unrolled MLP) compiles for 256 s on a 2-core CPU with an empty
# Inductor cache (10 s warm): make test-slow runs it; its eager mod is in the default suite.
COMPILED = [pytest.param(n, marks=pytest.mark.slow) if n == "fire" else n for n in FLEX]


@needs_flex
@pytest.mark.parametrize("name", COMPILED)
def test_compiled_flex_forward_equals_blocked(name):
    """The fused kernel CUDA runs, compiled by Inductor for the CPU (forward only there). One
    compilation (~10 s on this CPU; the score_mod's code and the shapes do not change between
    encodings) serves every case and the model test below."""
    enc = encoding_of(name)
    q, k, v = qkv(2, model_layout=True)
    pos = positions("per_row")
    with torch.no_grad():
        mod = own_score_mod(enc, pos)
        got = flex_bias_attention(q, k, v, pos, pos, enc.bias, compile=True, score_mod=mod)
        expected = blocked_bias_attention(q, k, v, pos, pos, enc.bias, block_size=8)
        unbiased = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(got, unbiased, atol=1e-3)  # the score_mod did add the bias


def dense_flex_attention(q, k, v, q_pos, k_pos, encoding):
    """What FlexAttention computes, with posx's score_mod evaluated on broadcast indices."""
    score_mod = own_score_mod(encoding, q_pos)
    if score_mod is None:
        table, lowest = distance_table(q_pos, k_pos, encoding.bias)
        score_mod = flex_score_mod(q_pos, k_pos, table, lowest)
    b, h, s = (torch.arange(n) for n in q.shape[:3])
    scores = score_mod(
        q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]),
        b[:, None, None, None],
        h[None, :, None, None],
        s[None, None, :, None],
        s[None, None, None, :],
    )
    scores = scores.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1) @ v


@pytest.mark.parametrize("pos_kind", ["shared", "per_row"])
@pytest.mark.parametrize("name", FLEX)
def test_flex_score_mod_gradients_equal_blocked(name, pos_kind):
    """Gradients through the score_mod (to q, k, v and the encoding's parameters, via the
    table) equal the blocked kernel's."""
    enc, pos = encoding_of(name), positions(pos_kind)
    owner = getattr(enc, "owner", enc)  # a per-layer view's parameters live in its owner
    params = list(owner.parameters())
    grads = []
    for run in (dense_flex_attention, None):
        q, k, v = qkv(3, grad=True)
        owner.zero_grad(set_to_none=True)
        if run is None:
            out = blocked_bias_attention(q, k, v, pos, pos, enc.bias, block_size=8)
        else:
            out = run(q, k, v, pos, pos, enc)
        (out * torch.linspace(-1, 1, D)).sum().backward()
        grads.append([q.grad, k.grad, v.grad] + [p.grad for p in params])
    for got, expected in zip(*grads, strict=True):
        assert got is not None and expected is not None
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", ["t5", "kerple_log"])
def test_learned_bias_cpu_shortcut_equals_the_sdpa_call_cuda_makes(name):
    """A bias that needs a gradient: on CUDA the blocked kernel hands it to SDPA as a mask, on
    the CPU to a written-out softmax (SDPA's fused CPU kernel has no mask gradient). Same
    outputs and gradients."""
    enc, pos = encoding_of(name), positions("per_row")
    owner = getattr(enc, "owner", enc)
    results = []
    for attend in (bias_kernel._attention_with_learned_bias, F.scaled_dot_product_attention):
        q, k, v = qkv(4, grad=True)
        owner.zero_grad(set_to_none=True)
        bias = enc.bias(pos, pos).masked_fill(torch.ones(S, S).triu(1).bool(), float("-inf"))
        out = attend(q, k, v, bias)
        (out * torch.linspace(-1, 1, D)).sum().backward()
        results.append([out, q.grad, k.grad, v.grad, *(p.grad for p in owner.parameters())])
    for got, expected in zip(*results, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


class Attending(PositionalEncoding):
    def attend(self, q, k, v, q_pos, k_pos):
        return v


def test_kernel_choice():
    alibi, fire = ALiBi(4), FIRE(4, train_length=16)
    assert choose_kernel(NoPE(), CUDA) == "sdpa"
    assert choose_kernel(Attending(), CUDA, "flex") == "attend"
    # auto: FlexAttention on CUDA (forward and backward), blocked elsewhere
    assert choose_kernel(alibi, CUDA, "auto", flex_available=True) == "flex"
    assert choose_kernel(alibi, CUDA, "auto", needs_grad=True, flex_available=True) == "flex"
    assert choose_kernel(alibi, CPU, "auto", flex_available=True) == "blocked"
    assert choose_kernel(alibi, CUDA, "auto", flex_available=False) == "blocked"
    # flex: wherever PyTorch runs it; the CPU has no FlexAttention backward
    assert choose_kernel(alibi, CPU, "flex", flex_available=True) == "flex"
    assert choose_kernel(alibi, CPU, "flex", needs_grad=True, flex_available=True) == "blocked"
    # blocked: never FlexAttention; fractional positions have no distance table
    assert choose_kernel(alibi, CUDA, "blocked", flex_available=True) == "blocked"
    assert choose_kernel(alibi, CUDA, float_positions=True, flex_available=True) == "blocked"
    # FIRE's bias reads the query's position: FlexAttention through its own score_mod, in
    # evaluation; its MLP has no compiled FlexAttention backward (H200, issue 58): blocked
    for kernel in ("auto", "flex"):
        assert choose_kernel(fire, CUDA, kernel, flex_available=True) == "flex"
        assert choose_kernel(fire, CUDA, kernel, True, flex_available=True) == "blocked"
    assert choose_kernel(fire, CPU, "auto", flex_available=True) == "blocked"
    # a bias of more than the distance, with no score_mod: blocked
    for kernel in ("auto", "flex"):
        assert choose_kernel(QueryScaled(), CUDA, kernel, flex_available=True) == "blocked"
    with pytest.raises(ValueError, match="auto, blocked, flex"):
        choose_kernel(alibi, CPU, "fused")
    assert KERNELS == ("auto", "blocked", "flex")


def test_causal_attention_passes_what_it_knows_to_the_choice(monkeypatch):
    seen = []
    monkeypatch.setattr(attention, "choose_kernel", lambda *args: seen.append(args) or "sdpa")
    q, k, v = qkv(grad=True)
    attention.causal_attention(q, k, v, torch.arange(S), torch.arange(S), NoPE(), 8, "flex")
    with torch.no_grad():
        attention.causal_attention(q, k, v, torch.arange(S) * 0.5, torch.arange(S) * 0.5, NoPE())
    assert seen[0][1:] == (CPU, "flex", True, False)
    assert seen[1][1:] == (CPU, "auto", False, True)


def test_causal_attention_dispatches_on_the_choice(monkeypatch):
    calls = []
    monkeypatch.setattr(attention, "choose_kernel", lambda *args: "flex")
    monkeypatch.setattr(
        attention,
        "flex_bias_attention",
        lambda q, k, v, qp, kp, fn, score_mod: calls.append((fn, score_mod)) or q,
    )
    q, k, v = qkv()
    enc = encoding_of("t5")  # a bias of the distance: the table (score_mod None)
    assert attention.causal_attention(q, k, v, torch.arange(S), torch.arange(S), enc) is q
    assert calls == [(enc.bias, None)]
    fire = FIRE(H, train_length=16)
    with torch.no_grad():  # its own score_mod, the piecewise form without a gradient
        attention.causal_attention(q, k, v, torch.arange(S), torch.arange(S), fire)
    assert calls[1][0] == fire.bias and callable(calls[1][1])
    alibi = ALiBi(H)  # computed per pair: its own score_mod
    attention.causal_attention(q, k, v, torch.arange(S), torch.arange(S), alibi)
    assert calls[2][0] == alibi.bias and callable(calls[2][1])


def test_a_flex_failure_falls_back_to_blocked_once_and_says_why(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(attention, "flex_bias_attention", broken)
    enc, pos = ALiBi(H), torch.arange(S)
    q, k, v = qkv()
    assert flex_unsupported_reason(enc, flex_available=True) is None
    with torch.no_grad(), pytest.warns(UserWarning, match="FlexAttention failed for ALiBi"):
        got = attention.causal_attention(q, k, v, pos, pos, enc, kernel="flex")
        expected = blocked_bias_attention(q, k, v, pos, pos, enc.bias)
    torch.testing.assert_close(got, expected)
    assert "no C++ compiler" in flex_unsupported_reason(enc, flex_available=True)
    assert choose_kernel(enc, CUDA, "flex", flex_available=True) == "blocked"


@needs_flex
def test_the_model_runs_flex_attention_on_the_cpu_when_asked():
    """``attention_kernel="flex"`` takes FlexAttention (compiled) for inference on the CPU,
    and training steps there take the blocked kernel (no FlexAttention backward on CPU)."""
    cfg = composed(["encoding=alibi", *DIMS])
    torch.manual_seed(0)
    model = build_model(cfg, vocab_size=40).eval()
    tokens = torch.arange(S).remainder(40).unsqueeze(0).repeat(B, 1)
    pos = positions("per_row")
    with torch.no_grad():
        blocked = model(tokens, pos)
        model.attention_kernel = "flex"
        flex = model(tokens, pos)
    torch.testing.assert_close(flex, blocked, atol=1e-5, rtol=1e-5)
    model(tokens, pos).sum().backward()  # grad enabled: the blocked kernel, no error
    with pytest.raises(ValueError, match="attention_kernel must be one of"):
        model.attention_kernel = "fast"


def test_query_block_keeps_one_block_under_the_budget():
    budget = budgets.MAX_BLOCK_ELEMENTS
    assert query_block(256, 8, 4, 64) == 256  # short sequences: the configured block
    for keys in (4096, 16384, 32768, 10**6):
        block = query_block(256, 1, 4, keys)
        assert block * 4 * keys <= budget or block == 1
    assert query_block(256, 1, 4, 32768) == budget // (4 * 32768)


def test_no_block_exceeds_the_budget_at_long_lengths(monkeypatch):
    """With a small budget, a long sequence's largest bias stays within it: memory linear in s."""
    monkeypatch.setattr(budgets, "MAX_BLOCK_ELEMENTS", 4 * 8 * 64)  # 8 queries x 64 keys
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
from posx.kernels.bias import blocked_bias_attention
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
