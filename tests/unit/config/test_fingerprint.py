"""Config fingerprints: what identifies an experiment and what does not."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from posx.config.fingerprint import (
    NOT_IDENTITY,
    config_fingerprint,
    flat_config,
    identity_config,
    run_fingerprint,
)

BASE = {
    "model": {"d_model": 32, "n_layers": 1},
    "train": {"length": 16, "steps": 100, "lr": 0.003, "device": "auto", "progress": True},
    "eval": {"lengths": [16, 32], "tokens": 256, "seed": 1234},
    "encoding": {"_target_": "posx.encodings.rope.RoPE", "_partial_": True, "base": 10000},
    "task": {"_target_": "posx.tasks.synthetic.copy.CopyTask", "num_symbols": 16},
    "seed": 0,
    "root": "results",
}


def changed(**dotted) -> dict:
    cfg = OmegaConf.create(BASE)
    for key, value in dotted.items():
        OmegaConf.update(cfg, key.replace("__", "."), value)
    return OmegaConf.to_container(cfg)


def test_flat_config_has_dotted_scalar_leaves():
    flat = flat_config(BASE)
    assert flat["train.steps"] == 100 and flat["encoding._target_"].endswith("RoPE")
    assert json.loads(flat["eval.lengths"]) == [16, 32]
    assert flat["model.dropout"] == 0.0  # a schema default filled in
    assert all(not isinstance(v, dict | list) for v in flat.values())


@pytest.mark.parametrize(
    "change",
    [
        {"seed": 3},
        {"root": "/elsewhere"},
        {"train__device": "cuda"},
        {"train__progress": False},
        {"train__log_every": 1},
        {"train__resume": True},
        {"eval__lengths": [16, 32, 64, 128]},
        {"eval__batch_tokens": 64},
    ],
)
def test_seed_paths_and_bookkeeping_do_not_change_the_fingerprint(change):
    assert config_fingerprint(changed(**change)) == config_fingerprint(BASE)


@pytest.mark.parametrize(
    "change",
    [
        {"train__steps": 300},
        {"train__lr": 0.001},
        {"model__d_model": 64},
        {"encoding__base": 500},
        {"task__num_symbols": 8},
        {"eval__tokens": 1024},  # another held-out set size: other numbers
        {"encoding___target_": "posx.encodings.alibi.ALiBi"},
    ],
)
def test_every_other_key_changes_the_fingerprint(change):
    assert config_fingerprint(changed(**change)) != config_fingerprint(BASE)


def test_identity_leaves_out_exactly_the_listed_keys():
    keys = identity_config(BASE)
    assert "seed" not in keys and "train.device" not in keys and "eval.lengths" not in keys
    assert "train.steps" in keys and "eval.tokens" in keys
    assert not [k for k in keys if any(k == n or k.startswith(f"{n}.") for n in NOT_IDENTITY)]


def test_fingerprint_is_stable_across_yaml_and_number_spelling(tmp_path):
    a = config_fingerprint(BASE)
    assert len(a) == 12 and int(a, 16) >= 0
    assert config_fingerprint(OmegaConf.create(BASE)) == a  # DictConfig or dict
    assert config_fingerprint(changed(encoding__base=10000.0)) == a  # 10000 == 10000.0
    assert config_fingerprint(changed(train__steps="${model.d_model}")) == config_fingerprint(
        changed(train__steps=32)
    )  # interpolations are resolved first
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(BASE)))
    assert run_fingerprint(run) == a  # from the saved file, as `posx report` computes it
    assert run_fingerprint(tmp_path / "no_run", OmegaConf.create(BASE)) == a
    assert run_fingerprint(tmp_path / "no_run") == ""
