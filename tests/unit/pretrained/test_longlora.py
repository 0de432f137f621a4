"""LongLoRA on a tiny random Llama: what trains is LoRA + embeddings + norms, the merged model's
forward equals the peft model's, S²-Attn runs in training mode only (full attention at
evaluation), and a model without separate q/k/v/o projections is refused."""

from __future__ import annotations

import pytest
import torch
import transformers

from posx.errors import ConfigError
from posx.pretrained.extend.longlora import LoraSpec, apply_lora, check_targets, merge


def tiny_llama() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    return transformers.AutoModelForCausalLM.from_config(config)


def test_trainable_parameters_are_lora_embeddings_and_norms():
    model = tiny_llama()
    apply_lora(model, LoraSpec())
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    lora = {n for n in trainable if "lora_" in n}
    want_lora = {f"model.layers.{i}.self_attn.{t}.lora_{ab}.default.weight"
                 for i in range(2) for t in ("q_proj", "k_proj", "v_proj", "o_proj")
                 for ab in "AB"}  # fmt: skip
    assert lora == want_lora
    full = trainable - lora
    kinds = {type(m).__name__ for n, m in model.named_modules()
             if any(n and p.startswith(n + ".") and p.count(".") == n.count(".") + 1
                    for p in full)}  # fmt: skip
    assert kinds == {"Embedding", "LlamaRMSNorm"}, kinds
    norms = sum(1 for m in model.modules() if type(m).__name__ == "LlamaRMSNorm")
    assert len(full) == 1 + norms  # the token embedding and every norm's weight
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert any("mlp" in n for n in frozen) and any("lm_head" in n for n in frozen)
    assert all("lora_" not in n for n in frozen)
    rank8 = [p for n, p in model.named_parameters() if "q_proj.lora_A" in n][0]
    assert rank8.shape[0] == 8


def test_the_merged_model_computes_what_the_peft_model_computes():
    model = tiny_llama()
    peft_model = apply_lora(model, LoraSpec())
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # LoRA's B starts at zero: give the update something to merge
        for name, param in model.named_parameters():
            if "lora_B" in name or "norm" in name:
                param.add_(0.1 * torch.randn(param.shape, generator=gen))
    ids = torch.randint(64, (2, 16), generator=gen)
    model.eval()
    with torch.no_grad():
        before = peft_model(input_ids=ids).logits
        merged = merge(peft_model, model, "sdpa")
        after = merged(input_ids=ids).logits
    assert not any("lora_" in n for n, _ in merged.named_parameters())
    assert merged.config._attn_implementation == "sdpa"
    torch.testing.assert_close(after, before, atol=1e-5, rtol=1e-5)


def test_s2_attention_in_training_full_attention_at_evaluation():
    ids = torch.randint(64, (1, 32), generator=torch.Generator().manual_seed(2))
    model = tiny_llama()
    with torch.no_grad():
        plain = model.eval()(input_ids=ids).logits
    apply_lora(model, LoraSpec(group_fraction=0.25))
    with torch.no_grad():
        evaluated = model.eval()(input_ids=ids).logits
        trained = model.train()(input_ids=ids).logits  # no dropout in the tiny Llama
    torch.testing.assert_close(evaluated, plain, atol=1e-5, rtol=1e-5)
    assert torch.allclose(trained[:, :4], plain[:, :4], atol=1e-5)  # the first half group: all keys
    assert not torch.allclose(trained[:, 8:], plain[:, 8:], atol=1e-3)  # later: fewer keys
    whole = tiny_llama()
    apply_lora(whole, LoraSpec(group_fraction=1.0))
    with torch.no_grad():
        torch.testing.assert_close(whole.train()(input_ids=ids).logits, plain, atol=1e-5,
                                   rtol=1e-5)  # fmt: skip


def test_a_model_without_the_target_projections_is_refused():
    config = transformers.GPTNeoXConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=1, num_attention_heads=4)  # fmt: skip
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    with pytest.raises(ConfigError, match="gpt_neox has no q_proj, k_proj, v_proj, o_proj"):
        check_targets(model, LoraSpec())


def test_the_memory_estimate_counts_optimizer_state_for_what_trains_only():
    from posx.pretrained.extend.memory import Layout, estimate, model_shape

    model = tiny_llama()
    shape = model_shape(model, model.config)
    layout = Layout(64, 1, 1, False, 4, False)
    full = estimate(shape, layout)["states"]
    from posx.pretrained.extend.longlora import trainable_count

    counted = trainable_count(model, LoraSpec())
    apply_lora(model, LoraSpec())
    assert counted == sum(p.numel() for p in model.parameters() if p.requires_grad)
    lora = estimate(shape.__class__(**{**vars(shape), "trainable": counted}), layout)["states"]
    assert full == 16 * shape.params and lora == 4 * shape.params + 12 * counted < full


def test_the_plan_of_n_processes_shards_what_trains(tmp_path):
    """Issue 56: ``--dry-run train.world_size=4`` of LongLoRA is planned (it was refused), with
    the fp32 weights and the trainable parameters' gradients and AdamW state sharded by 4, and
    at a limit between the two it fits where full fine-tuning (PI) does not."""
    from posx.pretrained.extend.longlora import trainable_count
    from posx.pretrained.extend.memory import check_room
    from posx.pretrained.extend.plan import make_plan
    from posx.pretrained.extend.settings import Options, parse_settings
    from posx.runtime.distributed import World
    from tests.unit.pretrained.tiny_models import save_model

    model = save_model("llama", tmp_path / "llama")
    words = ["extend.factor=2", "train.world_size=4", "train.batch_size=4"]
    plans = {m: make_plan(f"hf:{model}", parse_settings([f"extension={m}", *words]),
                          Options(dry_run=True), World()) for m in ("pi", "longlora")}  # fmt: skip
    full, lora = plans["pi"], plans["longlora"]
    assert lora.layout.world == 4 and "4 on cpu (FSDP2, sharded)" in "\n".join(lora.lines())
    with torch.device("meta"):
        meta = transformers.AutoModelForCausalLM.from_config(lora.config)
    params, trained = full.shape.params, trainable_count(meta, LoraSpec())
    assert trained < params and lora.shape.trainable == trained
    assert full.parts["states"] == 16 * params // 4
    assert lora.parts["states"] == (4 * params + 12 * trained) // 4
    assert {k: v for k, v in lora.parts.items() if k != "states"} == {
        k: v for k, v in full.parts.items() if k != "states"}  # fmt: skip
    between = (full.need + lora.need) // 2
    check_room(lora.shape, lora.layout, (between, "the limit"), "llama")
    with pytest.raises(ConfigError, match="needs about .* per process \\(4 process\\(es\\)\\)"):
        check_room(full.shape, full.layout, (between, "the limit"), "llama")
    assert any(
        f"trains     {trained:,} of {params:,} parameters" in line for line in lora.lines()
    ), lora.lines()


def test_every_copy_starts_from_the_same_adapters_and_rank_0_rebuilds_the_trained_model():
    """What makes N processes save what one does: the adapters drawn from ``seed``, not the
    global generator (one process, the meta model and rank 0's loaded copy each apply them),
    and the model rebuilt whole from gathered weights computing what the trained one does."""
    from posx.pretrained.extend.engine import rebuild
    from posx.pretrained.extend.longlora import LoraAdapter

    adapter = LoraAdapter(LoraSpec(), seed=3)
    first, second = tiny_llama(), tiny_llama()
    attention = adapter(first).attention
    torch.randn(100)  # the global generator moves on between the two
    adapter(second)
    a = {n: p for n, p in first.named_parameters() if "lora_A" in n}
    assert a and all(torch.equal(p, dict(second.named_parameters())[n]) for n, p in a.items())
    other = tiny_llama()
    LoraAdapter(LoraSpec(), seed=4)(other)
    assert not torch.equal(*(dict(m.named_parameters())[next(iter(a))] for m in (first, other)))
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():  # "trained": the adapters and norms moved
        for name, param in first.named_parameters():
            if "lora_B" in name or "norm" in name:
                param.add_(0.1 * torch.randn(param.shape, generator=gen))
    weights = {k: v.clone() for k, v in first.state_dict().items()}
    model, adapted = rebuild(first.config, False, weights, adapter)
    ids = torch.randint(64, (1, 16), generator=gen)
    first.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, first(input_ids=ids).logits)
        merged = merge(adapted.peft_model, model, attention)
        torch.testing.assert_close(merged(input_ids=ids).logits, first(input_ids=ids).logits,
                                   atol=1e-5, rtol=1e-5)  # fmt: skip
    assert merged.config._attn_implementation == "sdpa"
