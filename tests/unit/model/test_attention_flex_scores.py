"""Encodings that compute attention themselves, in FlexAttention when asked
(``model.attention_kernel=flex``): the kernel choice, the model's output through FlexAttention's
eager CPU forward against the default path (``attend``) at lengths past training, the fallback
when FlexAttention fails, and (slow) the compiled kernel CUDA runs, compiled for the CPU.

Which encodings hand FlexAttention their scores is found by globbing configs/encoding/*.yaml,
as test_attention_kernels.py finds the bias encodings.
"""

from __future__ import annotations

import pytest
import torch

from posx.config.build import build_model
from posx.config.compose import CONFIG_DIR
from posx.kernels.flex.attention import FLEX_AVAILABLE, flex_unsupported_reason
from posx.kernels.flex.tables import FlexScores, flex_scores_attention
from posx.model import attention
from posx.model.attention import choose_kernel
from tests.conftest import composed
from tests.unit.kernels.test_flex_tables import dense_flex
from tests.unit.model.test_attention_kernels import CPU, CUDA, DIMS, encoding_of

needs_flex = pytest.mark.skipif(not FLEX_AVAILABLE, reason="torch without FlexAttention")
NAMES = [
    p.stem
    for p in sorted((CONFIG_DIR / "encoding").glob("*.yaml"))
    if encoding_of(p.stem).has_flex_scores
]
LENGTHS = [16, 37, 64]  # train.length is 16


def test_the_glob_finds_the_distance_table_encodings():
    assert NAMES == ["deberta", "shaw", "transformer_xl"]
    assert all(encoding_of(n).has_attend for n in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_kernel_choice_is_opt_in(name):
    """``flex`` takes FlexAttention wherever it runs (the CPU: no gradient); ``auto`` and
    ``blocked`` keep ``attend`` until a GPU run measures the two (scripts/bench_gpu.py)."""
    enc = encoding_of(name)
    assert choose_kernel(enc, CUDA, "flex", flex_available=True) == "flex"
    assert choose_kernel(enc, CUDA, "flex", needs_grad=True, flex_available=True) == "flex"
    assert choose_kernel(enc, CUDA, "flex", float_positions=True, flex_available=True) == "flex"
    assert choose_kernel(enc, CPU, "flex", flex_available=True) == "flex"
    assert choose_kernel(enc, CPU, "flex", needs_grad=True, flex_available=True) == "attend"
    assert choose_kernel(enc, CUDA, "flex", flex_available=False) == "attend"
    for kernel in ("auto", "blocked"):
        for grad in (False, True):
            assert choose_kernel(enc, CUDA, kernel, grad, flex_available=True) == "attend"
    assert flex_unsupported_reason(enc, flex_available=True) is None


def eager_flex(monkeypatch) -> list[int]:
    """Routes the model's FlexAttention calls to the eager (unfused) forward, counting them."""
    calls: list[int] = []

    def eager(scores, v, compile=True):  # noqa: ARG001 - the model asks for compiled
        calls.append(v.shape[-2])
        return flex_scores_attention(scores, v, compile=False)

    monkeypatch.setattr(attention, "flex_scores_attention", eager)
    return calls


@needs_flex
@pytest.mark.filterwarnings("ignore:.*without torch.compile")
@pytest.mark.parametrize("explicit", [False, True], ids=["arange", "per-row positions"])
@pytest.mark.parametrize("name", NAMES)
def test_the_model_through_flex_attention_equals_the_default(name, explicit, monkeypatch):
    """The model's logits with ``attention_kernel=flex`` (every layer in FlexAttention's eager
    forward) equal the default path's, at the training length and past it."""
    calls = eager_flex(monkeypatch)
    torch.manual_seed(0)
    model = build_model(composed([f"encoding={name}", *DIMS]), vocab_size=40).eval()
    with torch.no_grad():
        for p in model.encoding.parameters():
            p.normal_(std=0.3)
    for s in LENGTHS:
        tokens = torch.arange(s).remainder(40).unsqueeze(0).repeat(2, 1)
        pos = torch.stack((torch.arange(s) + 3, torch.arange(s) * 2)) if explicit else None
        with torch.no_grad():
            model.attention_kernel = "auto"
            expected = model(tokens, pos)
            model.attention_kernel = "flex"
            calls.clear()
            got = model(tokens, pos)
        assert calls == [s] * len(model.blocks)  # every layer took FlexAttention
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    model(tokens).sum().backward()  # a gradient on the CPU: attend, no error


def test_a_flex_failure_falls_back_to_attend_once_and_says_why(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(attention, "flex_scores_attention", broken)
    enc = encoding_of("shaw")
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, 9, 16, generator=gen) for _ in range(3))
    pos = torch.arange(9)
    with torch.no_grad(), pytest.warns(UserWarning, match="failed for Shaw.*own attention"):
        got = attention.causal_attention(q, k, v, pos, pos, enc, kernel="flex")
        expected = enc.attend(q, k, v, pos, pos)
    torch.testing.assert_close(got, expected)
    assert "no C++ compiler" in flex_unsupported_reason(enc, flex_available=True)
    assert choose_kernel(enc, CUDA, "flex", flex_available=True) == "attend"


@needs_flex
def test_positions_without_an_exact_route_take_attend(monkeypatch):
    """Shaw at positions that do not increase: ``flex_scores`` says ``None``, attention calls
    ``attend`` (no warning, nothing remembered)."""
    calls = eager_flex(monkeypatch)
    enc = encoding_of("shaw")
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 4, 9, 16, generator=gen) for _ in range(3))
    pos = torch.arange(9).flip(0)
    with torch.no_grad():
        got = attention.causal_attention(q, k, v, pos, pos, enc, kernel="flex")
        torch.testing.assert_close(got, enc.attend(q, k, v, pos, pos))
    assert calls == [] and flex_unsupported_reason(enc, flex_available=True) is None


# Inductor compiles FlexAttention for the CPU here: 3-8 s each with a warm cache, minutes on a
# 2-core machine with a cold one, so make test-slow runs it.
@pytest.mark.slow
@needs_flex
@pytest.mark.parametrize("name", NAMES)
def test_the_compiled_kernel_equals_the_default(name):
    """What CUDA runs (FlexAttention compiled by Inductor), here compiled for the CPU (forward
    only), through the model at a length past training. Shaw's value term needs the
    log-sum-exp, which Inductor's CPU FlexAttention does not return: there its scores are
    compiled alone (against their eager evaluation), and the model falls back to ``attend``,
    saying why once."""
    torch.manual_seed(0)
    model = build_model(composed([f"encoding={name}", *DIMS]), vocab_size=40).eval()
    tokens = torch.arange(37).remainder(40).unsqueeze(0).repeat(2, 1)
    layer = model.encoding.for_layer(0)
    needs_lse = name == "shaw"
    with torch.no_grad():
        expected = model(tokens)
        model.attention_kernel = "flex"
        if needs_lse:
            with pytest.warns(UserWarning, match="failed for Shaw.*NotImplementedError"):
                got = model(tokens)
        else:
            got = model(tokens)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    reason = flex_unsupported_reason(layer, flex_available=True)
    assert (reason is not None and "log-sum-exp" in reason) if needs_lse else reason is None
    if needs_lse:  # the score_mod compiled, without the value term
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(2, 4, 37, 16, generator=gen) for _ in range(3))
        pos = torch.arange(37)
        with torch.no_grad():
            scores = layer.flex_scores(q, k, v, pos, pos)
            scores = FlexScores(scores.q, scores.k, scores.scale, scores.score_mod)
            got = flex_scores_attention(scores, v, compile=True)
            expected = dense_flex(scores, v, pos)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
