"""posx's protocols on pretrained models equal the model's own computations: full-mode loss is
the model's forward loss, sliding mode a per-token brute force, each scaling the model built
with that scaling in its config, and bytes per row a count from the raw text."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from posx.pretrained import load
from posx.pretrained.evaluate import CausalLM, Settings, evaluate_text
from posx.pretrained.scaling import Variant, parse_variant
from posx.pretrained.text import held_out_bytes, token_bytes, tokenize_held_out


def loaded(tiny_dir, name):
    source = load.find_model(f"hf:{tiny_dir / name}")
    config = load.load_config(source, False)
    model = load.load_model(source, config, torch.float32, False)
    tok = load.load_tokenizer(source, False)
    raw, corpus = held_out_bytes(str(tiny_dir / "corpus.txt"), 0.5, 10**6, None)
    return source, model, tok, tokenize_held_out(tok, raw, corpus)


def rows_of(model, text, **settings):
    settings.setdefault("tokens", 256)
    rows, _ = evaluate_text(model, text, Settings(**settings), 32, torch.device("cpu"))
    return rows


@pytest.mark.parametrize("name", ["llama", "qwen2", "gpt2"])
def test_full_mode_loss_is_the_models_own_forward_loss(tiny_dir, name):
    _, model, _, text = loaded(tiny_dir, name)
    # 31 tokens read, 32 given to the model with labels (GPT-2's table holds 32)
    (row,) = rows_of(model, text, lengths=[31], tokens=31 * 8)
    data, _ = text.windows(31, 8)
    ids = torch.cat([data.inputs, data.targets[:, -1:]], dim=1)
    with torch.no_grad():
        own = model(input_ids=ids, labels=ids).loss.item()  # transformers shifts the labels
    assert row["status"] == "ok" and row["tokens"] == 8 * 31
    assert row["loss"] == pytest.approx(own, abs=1e-5)


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_sliding_mode_equals_a_per_token_brute_force(tiny_dir, name):
    _, model, _, text = loaded(tiny_dir, name)
    length, window, stride = 64, 16, 6
    (row,) = rows_of(model, text, lengths=[length], mode="sliding", window=window,
                     stride=stride, tokens=128)  # fmt: skip
    data, _ = text.windows(length, 2)
    total, count = 0.0, 0
    ends = [window]
    while ends[-1] < length:
        ends.append(min(ends[-1] + stride, length))
    with torch.no_grad():
        for seq in range(len(data.inputs)):
            for t in range(length):
                end = next(e for e in ends if t < e)  # the first window that holds token t
                start = end - window
                logits = model(input_ids=data.inputs[seq : seq + 1, start:end]).logits[0]
                target = data.targets[seq, t]
                total += F.cross_entropy(logits[t - start], target).item()
                count += 1
    assert (row["window"], row["stride"], row["tokens"]) == (window, stride, count)
    assert row["loss"] == pytest.approx(total / count, abs=1e-5)


def own_scaling(variant: Variant, base: dict, head_dim: int) -> dict:
    """The rope_parameters a user writes into the model's config for each variant."""
    theta = base["rope_theta"]
    table = {
        "linear": {"rope_type": "linear", "factor": 2.0, "rope_theta": theta},
        "ntk": {"rope_type": "default", "rope_theta": theta * 2.0 ** (head_dim / (head_dim - 2))},
        "dynamic_ntk": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": theta},
        "yarn": {"rope_type": "yarn", "factor": 2.0, "rope_theta": theta,
                 "original_max_position_embeddings": 32},
        "llama3": {"rope_type": "llama3", "factor": 2.0, "rope_theta": theta,
                   "original_max_position_embeddings": 32, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0},
    }  # fmt: skip
    return table[variant.type]


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_each_scaling_equals_the_model_built_with_it_in_its_config(tiny_dir, name):
    import transformers

    source, model, _, text = loaded(tiny_dir, name)
    kinds = ["linear", "ntk", "dynamic_ntk", "yarn", "llama3"]
    variants = [Variant(), *(parse_variant(f"{k}:2") for k in kinds)]
    rows = rows_of(model, text, lengths=[64], variants=variants)
    plain = rows[0]["loss"]
    data, _ = text.windows(64, 4)
    for variant, row in zip(variants[1:], rows[1:], strict=True):
        config = transformers.AutoConfig.from_pretrained(source.path)
        head_dim = config.hidden_size // config.num_attention_heads
        config.rope_parameters = own_scaling(variant, config.rope_parameters, head_dim)
        if variant.type == "dynamic_ntk":
            config.max_position_embeddings = 32
        scaled = transformers.AutoModelForCausalLM.from_pretrained(source.path, config=config)
        with torch.no_grad():  # the 64 tokens posx reads (dynamic NTK depends on how many)
            logits = scaled(input_ids=data.inputs).logits
        own = F.cross_entropy(logits.flatten(0, 1), data.targets.flatten()).item()
        assert row["loss"] == pytest.approx(own, abs=1e-5), variant
        assert abs(row["loss"] - plain) > 1e-4, f"{variant} changed nothing"
        assert row["overrides"] == variant.overrides
        assert json.loads(row["scaling"]) == pytest.approx(config.rope_parameters)
    # switching back leaves the model as saved
    assert rows_of(model, text, lengths=[64])[0]["loss"] == pytest.approx(plain, abs=1e-6)


def test_token_bytes_counts_each_byte_once():
    text = "aé b"  # é is two bytes
    # byte-level pieces of é share its character; a special token covers nothing
    offsets = [(0, 0), (0, 1), (1, 2), (1, 2), (2, 4)]
    assert token_bytes(text, offsets) == [0, 1, 2, 0, 2]
    assert sum(token_bytes(text, offsets)) == len(text.encode())


@pytest.mark.parametrize("name", ["llama", "llama_sp"])  # byte-level BPE, Unigram + Metaspace
def test_bytes_per_row_equal_a_count_from_the_raw_text(tiny_dir, name):
    _, model, tok, text = loaded(tiny_dir, name)
    assert int(text.nbytes.sum()) == len(text.text.encode())
    for mode in ("full", "sliding"):
        (row,) = rows_of(model, text, lengths=[48], mode=mode, window=16, tokens=200)
        n = row["sequences"]
        ids = text.ids[: 1 + n * 48].tolist()
        # the text the scored tokens stand for: everything decoded after the first token
        covered = tok.decode(ids, skip_special_tokens=True)
        first = tok.decode(ids[:1], skip_special_tokens=True)
        assert text.text.startswith(covered)
        assert row["bytes"] == len(covered.encode()) - len(first.encode())
        assert row["bpb"] == pytest.approx(row["loss"] * row["tokens"] / math.log(2) / row["bytes"])


def test_gpt2_past_its_position_table_is_unsupported(tiny_dir):
    _, model, _, text = loaded(tiny_dir, "gpt2")
    rows = rows_of(model, text, lengths=[32, 64], variants=[Variant(), Variant("yarn", 2.0)])
    status = [(r["eval_length"], r["overrides"] != "", r["status"]) for r in rows]
    assert status == [(32, False, "ok"), (64, False, "unsupported"),
                      (32, True, "unsupported"), (64, True, "unsupported")]  # fmt: skip
    assert "learned positions for 32 tokens" in rows[1]["reason"]
    assert "no rotary positions" in rows[2]["reason"]
    # sliding windows of its table's size reach any length
    (row,) = rows_of(model, text, lengths=[64], mode="sliding", window=32)
    assert row["status"] == "ok"


def test_the_scorer_passes_positions_to_the_model(tiny_dir):
    _, model, _, text = loaded(tiny_dir, "llama")
    ids = text.ids[:8][None]
    scorer = CausalLM(model)
    with torch.no_grad():
        moved = scorer(ids, torch.arange(8) + 5)
        plain = scorer(ids)
    assert not torch.allclose(moved, plain)
    assert torch.allclose(plain, model(input_ids=ids).logits)


def test_auto_dtype_is_bf16_on_a_gpu_and_fp32_on_a_cpu():
    assert load.pick_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert load.pick_dtype("auto", torch.device("cpu")) == torch.float32
    assert load.pick_dtype("fp16", torch.device("cpu")) == torch.float16


@pytest.mark.parametrize("bad", ["rerope:2", "yarn", "yarn:0.5", "pi:2"])
def test_bad_variants_are_one_line(bad):
    from posx.errors import ConfigError

    with pytest.raises(ConfigError, match="--variant"):
        parse_variant(bad)
