"""Self-Extend on ``transformers`` models through the attention interface: one attention layer
equals the reference algorithm (q and k rotated by the model's own rotary embedding at the
neighbour and at the grouped positions, merged by the neighbour mask, as datamllab/LongLM's
``self_extend_patch`` computes it), a window covering the sequence is the model as saved, and a
model without RoPE is refused."""

from __future__ import annotations

import math

import pytest
import torch

from posx.errors import ConfigError
from posx.pretrained.scaling import Scaler, Variant, parse_variant
from tests.unit.pretrained.test_pretrained_eval import loaded


def reference_layer(attn, rotary, hidden: torch.Tensor, group: int, window: int) -> torch.Tensor:
    """One attention layer's output under Self-Extend, computed as the reference code does."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    b, s, _ = hidden.shape
    shape = (b, s, -1, attn.head_dim)
    q = attn.q_proj(hidden).view(shape).transpose(1, 2)
    k = attn.k_proj(hidden).view(shape).transpose(1, 2)
    v = attn.v_proj(hidden).view(shape).transpose(1, 2)
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    pos = torch.arange(s)[None]
    shift = 0 if pos.max() < window else window - window // group
    cos, sin = rotary(v, pos)
    q_n, k_n = apply_rotary_pos_emb(q, k, cos, sin)
    q_g, _ = apply_rotary_pos_emb(q, k, *rotary(v, pos // group + shift))
    _, k_g = apply_rotary_pos_emb(q, k, *rotary(v, pos // group))
    neighbour_w = q_n @ k_n.transpose(2, 3) / math.sqrt(attn.head_dim)
    group_w = q_g @ k_g.transpose(2, 3) / math.sqrt(attn.head_dim)
    neighbour = torch.tril(torch.ones(s, s))
    if s - window > 0:
        neighbour[window:, :-window] -= torch.tril(torch.ones(s - window, s - window))
    causal = torch.full((s, s), float("-inf")).triu(1)
    weights = torch.where(neighbour.bool(), neighbour_w, group_w) + causal
    out = weights.softmax(-1) @ v
    return attn.o_proj(out.transpose(1, 2).reshape(b, s, -1))


@pytest.mark.parametrize("name", ["llama", "qwen2"])
@pytest.mark.parametrize("grad", [False, True])
def test_a_layer_equals_the_reference_algorithm(tiny_dir, name, grad):
    _, model, _, _ = loaded(tiny_dir, name)
    scaler = Scaler(model, 32)
    assert scaler.unsupported_reason(Variant("selfextend", 3.0, 5)) == ""
    params = scaler.apply(Variant("selfextend", 3.0, 5))
    assert params["self_extend_group"] == 3 and params["self_extend_window"] == 5
    attn, rotary = model.model.layers[0].self_attn, model.model.rotary_emb
    hidden = torch.randn(
        2, 40, model.config.hidden_size, generator=torch.Generator().manual_seed(0)
    )
    pos = torch.arange(40)[None].expand(2, -1)
    with torch.set_grad_enabled(grad):  # explicit blocks, or fused far keys without a gradient
        got, _ = attn(hidden, rotary(hidden, pos), None, position_ids=pos)
        want = reference_layer(attn, rotary, hidden, 3, 5)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    scaler.apply(Variant())
    assert model.config._attn_implementation == scaler.attention


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_a_window_covering_the_sequence_is_the_model_as_saved(tiny_dir, name):
    _, model, _, text = loaded(tiny_dir, name)
    ids = text.ids[:48][None]
    scaler = Scaler(model, 32)
    with torch.no_grad():
        plain = model(input_ids=ids).logits
        scaler.apply(Variant("selfextend", 4.0, 48))
        extended = model(input_ids=ids).logits
        scaler.apply(Variant("selfextend", 4.0, 8))
        grouped = model(input_ids=ids).logits
        scaler.apply(Variant())
        again = model(input_ids=ids).logits
    torch.testing.assert_close(extended, plain, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(grouped, plain, atol=1e-3)
    torch.testing.assert_close(again, plain)


def test_a_model_without_rope_is_refused(tiny_dir):
    _, model, _, _ = loaded(tiny_dir, "gpt2")
    reason = Scaler(model, 32).unsupported_reason(Variant("selfextend", 4.0, 8))
    assert "gpt2 has no rotary positions" in reason


@pytest.mark.parametrize(
    ("text", "want"),
    [("selfextend:4,512", Variant("selfextend", 4.0, 512)), ("selfextend:1,1", None)],
)
def test_the_variant_parses(text, want):
    got = parse_variant(text)
    assert got == (want or Variant("selfextend", 1.0, 1))
    assert got.overrides.split()[-1].startswith("encoding.scaling.window=")


@pytest.mark.parametrize(
    "bad", ["selfextend", "selfextend:4", "selfextend:4,", "selfextend:0,8", "selfextend:2.5,8",
            "selfextend:4,x", "selfextendx4"],
)  # fmt: skip
def test_bad_self_extend_variants_are_one_line(bad):
    with pytest.raises(ConfigError, match="selfextend:G,W"):
        parse_variant(bad)


def _greedy_without_cache(model, prompt: list[int], budget: int) -> list[int]:
    """Greedy tokens by a whole-window forward per step: Self-Extend's square path only."""
    ids = list(prompt)
    for _ in range(budget):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits
        ids.append(int(logits[0, -1].argmax()))
    return ids[len(prompt) :]


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_generation_with_a_kv_cache_equals_whole_windows(tiny_dir, name):
    """RULER generates with a KV cache: each new token's query meets the cached keys, grouped
    by their own positions. posx's batched greedy loop (left padding, positions from each
    prompt's first real token) gives the tokens a whole-window forward per step gives, past
    the window and the group boundaries, and each step's logits match."""
    from posx.pretrained.ruler.generate import greedy

    _, model, tok, text = loaded(tiny_dir, name)
    Scaler(model, 32).apply(Variant("selfextend", 3.0, 5))
    model.generation_config.eos_token_id = None  # only the tokenizer's end id stops a row
    prompts = [text.ids[:37].tolist(), text.ids[50:71].tolist()]  # two lengths: left padding
    got = greedy(model, tok, torch.device("cpu"), batch_tokens=10**6)(prompts, 9)
    want = [_greedy_without_cache(model, p, 9) for p in prompts]
    ends = {tok.eos_token_id} - {None}
    assert got == [[t for t in w[: next((i for i, t in enumerate(w) if t in ends), len(w))]]
                   for w in want]  # fmt: skip
    # the last step's logits, cached against whole-window
    ids = torch.tensor([prompts[0] + want[0][:-1]])
    with torch.no_grad():
        out = model(input_ids=ids[:, :-3], use_cache=True)
        cached = model(input_ids=ids[:, -3:], past_key_values=out.past_key_values,
                       use_cache=True).logits  # fmt: skip
        whole = model(input_ids=ids, use_cache=False).logits[:, -3:]
    torch.testing.assert_close(cached, whole, atol=1e-5, rtol=1e-4)
