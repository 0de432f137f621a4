"""Config fingerprints: what identifies an experiment and what does not."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from posx.config.fingerprint import (
    NOT_IDENTITY,
    config_fingerprint,
    flat_config,
    identity_config,
)
from posx.report import make_report
from posx.saved import SavedRun

REPO = Path(__file__).resolve().parents[3]
BASE = {
    "model": {"d_model": 32, "n_layers": 1},
    "train": {"length": 16, "steps": 100, "lr": 0.003, "device": "auto", "progress": True},
    "eval": {"lengths": [16, 32], "tokens": 256, "seed": 1234},
    "encoding": {"_target_": "posx.encodings.rope.RoPE", "_partial_": True, "base": 10000},
    "task": {"_target_": "posx.tasks.synthetic.copy.CopyTask", "num_symbols": 16},
    "seed": 0,
    "root": "results",
}
# Keys (and the nodes below them) that a run proved do not change its numbers.
PROVEN = ("model.attn_block_size", "model.attention_kernel", "train.max_memory", "train.compile")


def changed(**dotted) -> dict:
    cfg = OmegaConf.create(BASE)
    for key, value in dotted.items():
        OmegaConf.update(cfg, key.replace("__", "."), value)
    return OmegaConf.to_container(cfg)


def write_run(root: Path, name: str, cfg: dict, info: dict | None = None) -> Path:
    """A run directory with ``.hydra/config.yaml`` and, given ``info``, ``run.json``."""
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(cfg)))
    if info is not None:
        (run / "run.json").write_text(json.dumps({"schema_version": 1, **info}))
    return run


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
        {"train__progress": False},
        {"train__log_every": 1},
        {"train__resume": True},
        {"eval__lengths": [16, 32, 64, 128]},
        {"eval__batch_tokens": 64},
        # where it ran, once the precision is the same
        {"train__device": "cuda", "train__precision": "fp32", "eval__precision": "fp32"},
        # settings proven not to change a number (each reason names its test)
        {"model__attn_block_size": 64},
        {"model__attention_kernel": "blocked"},
        {"train__max_memory": "8G"},
        {"train__compile": True},
    ],
)
def test_seed_paths_and_bookkeeping_do_not_change_the_fingerprint(change):
    base = (
        {"train__precision": "fp32", "eval__precision": "fp32"} if "train__device" in change else {}
    )
    assert config_fingerprint(changed(**change)) == config_fingerprint(changed(**base))


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
        {"train__precision": "bf16"},
        {"eval__precision": "bf16"},
    ],
)
def test_every_other_key_changes_the_fingerprint(change):
    assert config_fingerprint(changed(**change)) != config_fingerprint(BASE)


def test_identity_leaves_out_exactly_the_listed_keys():
    """The keys left out are written here, not computed from NOT_IDENTITY: a key dropped from
    the list, or a filter that drops too much, fails."""
    nested = changed(
        logger={"tensorboard": {"_target_": "posx.tracking.tensorboard.TensorBoard"}},
        design={"max_distance": 4},
        eval__variants=[["encoding.scaling.type=yarn"]],
    )
    left_out = {
        "seed", "root", "invocation", "label", "chosen", "experiment_name",
        "design.max_distance", "logger.tensorboard._target_", "eval.variants",
        "eval.lengths", "eval.batch_tokens", "eval.buckets", "eval.mode", "eval.window",
        "eval.stride", "train.device", "train.threads", "train.progress",
        "train.progress_every", "train.log_every", "train.checkpoint_every", "train.resume",
        "train.eval_at_end", "train.max_memory", "train.compile", "model.attn_block_size",
        "model.attention_kernel",
        # a run trained from scratch: its (empty) extension settings are no part of it
        "extend.parent", "extend.parent_sha256", "extend.parent_fingerprint",
        "extend.parent_label", "extend.parent_step", "extend.base_length", "extend.resize",
        "extend.length", "extend.factor", "extend.steps", "extend.lr", "extend.warmup_steps",
        "extend.parent_length", "extend.base_factor", "extend.longrope.population",
        "extend.longrope.parents", "extend.longrope.mutations", "extend.longrope.crossovers",
        "extend.longrope.iterations", "extend.longrope.step", "extend.longrope.seed",
        "extend.longrope.windows", "extend.longrope.searched",
    }  # fmt: skip
    flat, keys = flat_config(nested), identity_config(nested)
    assert left_out <= set(flat)  # every one of them is really there to be left out
    assert set(flat) - set(keys) == left_out
    assert {"train.steps", "eval.tokens", "train.precision", "eval.precision"} <= set(keys)


@pytest.mark.parametrize("key", PROVEN)
def test_each_key_left_out_for_its_numbers_names_the_test_that_proves_it(key):
    """``model.attn_block_size``, ``model.attention_kernel``, ``train.max_memory`` and
    ``train.compile`` are left out because a test shows that they do not change a number; the
    reason names that test, and the test exists."""
    tests = re.findall(r"(tests/[\w/]+\.py)::(\w+)", NOT_IDENTITY[key])
    assert tests, NOT_IDENTITY[key]
    for path, name in tests:
        assert f"def {name}(" in (REPO / path).read_text(), f"{path}::{name}"


def test_fingerprint_is_stable_across_yaml_and_number_spelling(tmp_path):
    a = config_fingerprint(BASE)
    assert len(a) == 12 and int(a, 16) >= 0
    assert config_fingerprint(OmegaConf.create(BASE)) == a  # DictConfig or dict
    assert config_fingerprint(changed(encoding__base=10000.0)) == a  # 10000 == 10000.0
    assert config_fingerprint(changed(train__steps="${model.d_model}")) == config_fingerprint(
        changed(train__steps=32)
    )  # interpolations are resolved first
    run = write_run(tmp_path, "run", BASE)
    assert SavedRun(run).fingerprint == a  # from the saved file, as `posx report` computes it
    assert SavedRun(tmp_path / "no_run").fingerprint_with(OmegaConf.create(BASE)) == a
    assert SavedRun(tmp_path / "no_run").fingerprint == ""


# --- what `auto` resolved to, and the data: recorded in run.json ---------------------------------


def test_auto_precision_is_the_one_it_resolved_to():
    """``precision=auto`` is bf16 on CUDA and fp32 on the CPU: a run on each is not one
    experiment, where it ran is (when its precision was the same)."""
    gpu, cpu = changed(train__device="cuda"), changed(train__device="cpu")
    assert config_fingerprint(gpu) != config_fingerprint(cpu)
    assert identity_config(gpu)["train.precision"] == "bf16"
    assert identity_config(cpu)["train.precision"] == "fp32"
    assert identity_config(BASE)["train.precision"] == "auto"  # device auto: not known here
    assert config_fingerprint(cpu) == config_fingerprint(changed(train__precision="fp32"))


def test_a_gpu_bf16_run_and_a_cpu_fp32_run_are_not_averaged(tmp_path):
    """Same config (train.device=auto, precision=auto), one run on a GPU and one on the CPU:
    run.json records what auto resolved to, and the report keeps them apart."""
    runs = {}
    for seed, (precision, device) in enumerate([("bf16", "cuda"), ("fp32", "cpu")]):
        info = {"run": f"s{seed}", "encoding": "rope", "task": "copy", "model": "tiny",
                "seed": seed, "train_length": 16, "train_precision": precision,
                "eval_precision": precision}  # fmt: skip
        run = write_run(tmp_path / "runs", f"s{seed}", changed(seed=seed), info)
        row = {**info, "overrides": "", "eval_length": 16, "mode": "full", "window": 16,
               "stride": 16, "status": "ok", "reason": "", "loss": 1.0 + seed,
               "device": device, "precision": precision}  # fmt: skip
        pd.DataFrame([row]).to_csv(run / "eval.csv", index=False)
        runs[precision] = run
    assert SavedRun(runs["bf16"]).recorded_config.train.precision == "bf16"
    assert SavedRun(runs["fp32"]).recorded_config.eval.precision == "fp32"
    assert SavedRun(runs["bf16"]).fingerprint != SavedRun(runs["fp32"]).fingerprint
    (table,) = make_report(tmp_path, metric="loss").tables
    assert len(table.rows) == 2 and all(n == 1 for n in table.n.values())
    assert any("precision=bf16" in row for row in table.rows), table.rows


TEXT = {"corpus": "c.txt", "corpus_bytes": 9998, "corpus_crc32": 3968216753, "val_bytes": 500,
        "tokenizer": "byte", "length_mapping": "length = bytes of context"}  # fmt: skip


@pytest.mark.parametrize(
    "change",
    [{"corpus_crc32": 1}, {"corpus_bytes": 9999}, {"val_bytes": 499}, {"tokenizer_sha256": "ab"}],
)
def test_the_data_a_run_read_is_in_its_identity(tmp_path, change):
    """The same ``task.corpus`` can hold other text (``stdlib`` is the running Python's, a file
    or a dataset can change): the checksums run.json records tell the runs apart."""
    same = SavedRun(write_run(tmp_path, "a", BASE, {"task_info": TEXT})).fingerprint
    assert SavedRun(write_run(tmp_path, "b", BASE, {"task_info": TEXT})).fingerprint == same
    other = write_run(tmp_path, "c", BASE, {"task_info": {**TEXT, **change}})
    assert SavedRun(other).fingerprint != same
    assert SavedRun(other).recorded_config.data == {
        **{k: TEXT[k] for k in TEXT if k.endswith(("crc32", "bytes"))},
        **change,
    }
    # what only describes the data (its name, the length mapping) is not more identity
    relabelled = write_run(tmp_path, "d", BASE, {"task_info": {**TEXT, "length_mapping": "x"}})
    assert SavedRun(relabelled).fingerprint == same


def test_a_run_that_recorded_nothing_keeps_its_fingerprint(tmp_path):
    """Runs from before these records (no run.json facts) group as before: only their config."""
    old = write_run(tmp_path, "old", BASE, {"run": "old", "fingerprint": "917f7eede82b"})
    assert SavedRun(old).fingerprint == config_fingerprint(BASE)
    assert "data" not in SavedRun(old).recorded_config


def test_an_extension_saved_before_its_lengths_were_recorded_keeps_its_fingerprint():
    """extend.parent_length and extend.base_factor came later: an older extension's config
    has neither, and its identity is what it was (they are unset, not part of it), while a
    new extension's values tell two chains apart."""
    old = changed(extend__parent="results/runs/base", extend__length=64, extend__factor=4)
    assert not {"extend.parent_length", "extend.base_factor"} & set(identity_config(old))
    new = changed(extend__parent="results/runs/base", extend__length=64, extend__parent_length=16)
    chained = changed(
        extend__parent="results/runs/base", extend__length=64, extend__parent_length=32
    )
    assert config_fingerprint(new) != config_fingerprint(chained)


def test_a_run_saved_before_init_std_existed_keeps_its_fingerprint():
    """encoding.init_std came later, null meaning the 0.02 every earlier table used: a config
    without it and one with null are one experiment; another scale is another experiment."""
    learned = {"_target_": "posx.encodings.learned.Learned", "_partial_": True, "max_len": None}
    old, new, scaled = ({**BASE, "encoding": {**learned, **extra}} for extra in
                        ({}, {"init_std": None}, {"init_std": 1.0}))  # fmt: skip
    assert config_fingerprint(old) == config_fingerprint(new)
    assert config_fingerprint(scaled) != config_fingerprint(old)
