"""The parts of ``posx extend hf:``: the methods of configs/extension/ as a transformers config
takes them, the chunked loss against the model's own, the data order, the memory estimate."""

from __future__ import annotations

import pytest
import torch

from posx.errors import ConfigError
from posx.pretrained.extend.memory import Layout, Shape, estimate, fitting


@pytest.mark.parametrize(
    ("name", "scaling", "at_target", "chunks"),
    [("yarn", "yarn", True, 0), ("pi", "linear", True, 0), ("ntk", "ntk", True, 0),
     ("llama3", "llama3", True, 0), ("plain", None, True, 0), ("control", None, False, 0),
     ("pose", None, False, 2), ("longrope", "longrope", True, 0),
     ("longlora", "linear", True, 0)],
)  # fmt: skip
def test_every_method_yaml_reads_as_a_pretrained_method(name, scaling, at_target, chunks):
    from posx.pretrained.extend.method import read_method

    method = read_method(name)
    assert (method.scaling, method.at_target, method.pose_chunks) == (scaling, at_target, chunks)


def test_a_method_that_changes_more_than_positions_is_refused(tmp_path):
    from posx.pretrained.extend.method import read_method

    (tmp_path / "extension").mkdir()
    (tmp_path / "extension" / "wide.yaml").write_text("model:\n  d_model: 64\n")
    with pytest.raises(ConfigError, match="extension=wide sets model, which a pretrained"):
        read_method("wide", [tmp_path])
    with pytest.raises(ConfigError, match="extension=nope is not a method; choose from .*yarn"):
        read_method("nope")


def test_yarn_sets_the_transformers_scaling_and_the_new_length(tiny_dir):
    import transformers

    from posx.pretrained.extend.method import extended_config, read_method

    base = transformers.AutoConfig.from_pretrained(tiny_dir / "llama")
    new = extended_config(base, read_method("yarn"), 2.0, 32, 64)
    assert new.rope_parameters == {"rope_theta": 10000.0, "rope_type": "yarn", "factor": 2.0,
                                   "original_max_position_embeddings": 32}  # fmt: skip
    assert new.max_position_embeddings == 64 and base.max_position_embeddings == 32
    llama3 = extended_config(base, read_method("llama3"), 4.0, 32, 128).rope_parameters
    assert (llama3["low_freq_factor"], llama3["high_freq_factor"]) == (1.0, 4.0)
    gpt2 = transformers.AutoConfig.from_pretrained(tiny_dir / "gpt2")
    with pytest.raises(ConfigError, match="gpt2 has no rotary positions .* extension=plain"):
        extended_config(gpt2, read_method("yarn"), 2.0, 32, 64)
    with pytest.raises(ConfigError, match="gpt2 has learned positions for 32 tokens only"):
        extended_config(gpt2, read_method("plain"), 2.0, 32, 64)
    assert extended_config(gpt2, read_method("control"), 2.0, 32, 64).n_positions == 32


def test_a_family_whose_rotary_ignores_the_scaling_is_refused(tiny_dir):
    import transformers

    from posx.pretrained.extend.method import check_family, extended_config, read_method

    base = transformers.AutoConfig.from_pretrained(tiny_dir / "qwen2")
    new = extended_config(base, read_method("yarn"), 2.0, 32, 64)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(new)
    check_family(model, new, read_method("yarn"))  # qwen2 runs yarn
    model.model.rotary_emb.rope_type = "default"  # a family that ignores rope_parameters
    with pytest.raises(ConfigError, match="qwen2 does not support rope_type yarn"):
        check_family(model, new, read_method("yarn"))


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_the_chunked_loss_equals_the_models_own(tiny_dir, kind, monkeypatch):
    import transformers

    import posx.pretrained.extend.engine as engine

    monkeypatch.setattr(engine, "LOSS_CHUNK", 7)  # several chunks and a ragged last one
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_dir / kind).train()
    ids = torch.randint(
        0, model.config.vocab_size, (3, 20), generator=torch.Generator().manual_seed(0)
    )
    pos = torch.arange(20).expand(3, 20)
    ours = engine.LossModel(model)(ids, pos) / (3 * 19)
    theirs = model(input_ids=ids, labels=ids).loss
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
    ours.backward()
    grad = model.lm_head.weight.grad.clone()
    model.zero_grad()
    theirs.backward()
    torch.testing.assert_close(grad, model.lm_head.weight.grad, rtol=1e-5, atol=1e-7)


def test_a_step_reads_the_same_windows_whoever_asks(tiny_dir):
    from posx.pretrained.extend.data import TrainingText, positions

    text = TrainingText(torch.arange(100), {"corpus": "x"})
    first = text.batch(3, 4, 10, seed=1)
    assert torch.equal(first, TrainingText(torch.arange(100), {"corpus": "x"}).batch(3, 4, 10, 1))
    assert first.shape == (4, 10) and torch.equal(first[:, 1:] - first[:, :-1], torch.ones(4, 9))
    epoch = torch.cat([text.batch(s, 2, 10, 1) for s in range(5)])  # 10 windows: one epoch
    assert sorted(epoch[:, 0].tolist()) == list(range(0, 100, 10))
    pose = positions(2, 4, 8, 32, 2, seed=0)
    assert (
        pose.shape == (4, 8)
        and int(pose.max()) < 32
        and torch.equal(pose, positions(2, 4, 8, 32, 2, 0))
    )
    with pytest.raises(ConfigError, match="fewer than one window of 200"):
        text.window_count(200)


def test_the_estimate_shards_states_and_checkpointing_saves_activations():
    shape = Shape(params=8_000_000_000, layer_params=218_000_000, layers=32, hidden=4096,
                  heads=32, kv=1024, inner=14336, vocab=128256)  # fmt: skip
    one = Layout(16384, 1, 1, False, 2, False)
    eight = estimate(shape, Layout(16384, 1, 8, False, 2, False))
    assert estimate(shape, one)["states"] == 8 * eight["states"] == 128_000_000_000
    ckpt = estimate(shape, Layout(16384, 1, 8, True, 2, False))
    assert ckpt["activations"] < eight["activations"] / 5
    room = 80 * 2**30
    better = fitting(shape, one, room)  # the fewest processes that fit, checkpointing on
    assert better is not None and better[0].startswith("4 processes") and better[1] <= room
    assert sum(estimate(shape, Layout(16384, 1, 2, True, 2, False)).values()) > room


def test_longrope_on_a_model_that_carries_a_scaling_is_refused(tiny_dir):
    import transformers

    from posx.pretrained.extend.method import extended_config, read_method

    base = transformers.AutoConfig.from_pretrained(tiny_dir / "llama")
    longrope = extended_config(base, read_method("longrope"), 2.0, 32, 64)
    assert longrope.rope_parameters["rope_type"] == "longrope"
    yarn = extended_config(base, read_method("yarn"), 2.0, 32, 64)
    with pytest.raises(ConfigError, match="already carries a RoPE scaling .*extension=longrope"):
        extended_config(yarn, read_method("longrope"), 2.0, 64, 128)
