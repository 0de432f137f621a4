"""``posx extend hf:MODEL extension=longlora`` as a user types it: a tiny random Llama gets LoRA
adapters, trainable embeddings and norms, PI ×2 and S²-Attn in training; the merged model loads
in plain transformers, the adapter lies beside it, run.json has the lineage; a model without
separate q/k/v/o projections and a posx run are refused in one line with nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
import torch

from tests.conftest import REPO
from tests.integration.test_cli_errors import assert_one_line_error
from tests.integration.test_extend_pretrained_cli import extend_args, models, offline  # noqa: F401
from tests.unit.pretrained.tiny_models import byte_level_tokenizer


def test_longlora_saves_a_merged_model_and_its_adapter(cli, models, tmp_path):  # noqa: F811
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    root = tmp_path / "out"
    done = cli(*extend_args(models, root, "extension=longlora", "extend.factor=2",
                            "eval.lengths=[64]"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    (run,) = (root / "pretrained").iterdir()
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "extended" and info["encoding"] == "llama+linear×2+longlora+ft@64"
    lora = info["extension"]["longlora"]
    assert (lora["rank"], lora["alpha"], lora["group_fraction"]) == (8, 16, 0.25)
    assert lora["trainable_parameters"] < lora["parameters"]
    assert info["extension"]["rope_parameters"]["rope_type"] == "linear"
    model = AutoModelForCausalLM.from_pretrained(run / "model")
    assert model.config.rope_parameters["factor"] == 2.0
    saved = load_file(run / "model" / "model.safetensors")
    assert not any("lora" in k for k in saved)
    base = load_file(models / "llama" / "model.safetensors")
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(saved[q], base[q])  # LoRA's update is merged into the weights
    mlp = "model.layers.0.mlp.up_proj.weight"
    assert torch.equal(saved[mlp], base[mlp])  # frozen
    assert (run / "adapter" / "adapter_config.json").is_file()
    trained = load_file(run / "adapter" / "trainable_params.safetensors")
    assert "model.embed_tokens.weight" in trained and any("norm" in k for k in trained)
    assert not hasattr(model.config, "posx_s2attn_group_fraction")
    rows = pd.read_csv(run / "eval.csv", keep_default_na=False)
    assert set(rows["status"]) == {"ok"} and set(rows["eval_length"]) == {64}


def test_a_model_without_q_k_v_o_projections_is_refused(cli, models, tmp_path):  # noqa: F811
    import transformers

    neox = tmp_path / "neox"
    tok = byte_level_tokenizer()
    config = transformers.GPTNeoXConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=1, num_attention_heads=4,
                                        max_position_embeddings=32)  # fmt: skip
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(neox)
    tok.save_pretrained(neox)
    root = tmp_path / "out"
    result = cli(*extend_args(models, root, "extension=longlora", "extend.factor=2",
                              model=str(neox)))  # fmt: skip
    assert_one_line_error(result, 2, "gpt_neox has no q_proj, k_proj, v_proj, o_proj")
    assert not root.exists()


def test_without_peft_it_is_one_line(cli, models, tmp_path, monkeypatch):  # noqa: F811
    import sys

    monkeypatch.setitem(sys.modules, "peft", None)  # import peft fails
    root = tmp_path / "out"
    result = cli(*extend_args(models, root, "extension=longlora", "extend.factor=2"))
    assert_one_line_error(result, 2, "extension=longlora needs peft: pip install 'posx[longlora]'")
    assert not root.exists()


def test_a_length_s2_attn_cannot_group_is_one_line(cli, models, tmp_path):  # noqa: F811
    root = tmp_path / "out"
    result = cli(*extend_args(models, root, "extension=longlora", "extend.factor=1.5625"))
    assert_one_line_error(result, 2, "S²-Attn groups 50 tokens by 12")
    assert not root.exists()


def test_a_posx_run_is_refused(cli, copy_run, tmp_path):
    root = tmp_path / "out"
    result = cli("extend", str(copy_run()), "extension=longlora", f"root={root}")
    assert_one_line_error(result, 2, "extension=longlora trains LoRA adapters of a transformers")
    assert not root.exists()


def test_a_longlora_plan_fits_where_full_fine_tuning_does_not(cli, models, tmp_path):  # noqa: F811
    import re

    def plan(method: str, limit: str = "80G") -> tuple[float, str]:
        args = [f"extension={method}", "extend.factor=2", f"train.max_memory={limit}", "--dry-run"]
        out = cli(*extend_args(models, tmp_path / "out", *args)).stdout
        states = re.search(r"states ([\d.]+) MiB", out)
        fits = re.search(r"fits +(\w+)", out)
        return float(states.group(1)) if states else -1.0, fits.group(1) if fits else out

    (full, _), (lora, _) = plan("pi"), plan("longlora")
    assert 0 < lora < full, (full, lora)  # the frozen weights carry no gradient, no AdamW state
    total = {m: float(re.search(r"= ([\d.]+) MiB", cli(*extend_args(
        models, tmp_path / "out", f"extension={m}", "extend.factor=2", "--dry-run")).stdout
    ).group(1)) for m in ("pi", "longlora")}  # fmt: skip
    between = f"{(total['pi'] + total['longlora']) / 2 * 2**20:.0f}"
    assert plan("pi", between)[1] == "no" and plan("longlora", between)[1] == "yes"
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_two_processes_train_the_same_adapters_as_one(cli, models, tmp_path, monkeypatch):  # noqa: F811
    """Issue 56: torchrun --nproc_per_node 2 on gloo shards the LoRA model with FSDP2 (each
    process 2 of the 4 windows a step, a sharded checkpoint at step 2); the losses, the merged
    model, the adapter, the trained embeddings and norms and the evaluation rows equal the
    one-process run's. A one-process run stopped after step 3 resumes under torchrun from its
    checkpoint (adapters, embeddings, norms and AdamW state) to the same model."""
    from safetensors.torch import load_file

    import posx.pretrained.extend.train as loop

    args = ("extension=longlora", "extend.factor=2", "eval.lengths=[64]")
    one = cli(*extend_args(models, tmp_path / "one", *args))
    assert one.returncode == 0, one.stderr
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "POSX_DEBUG": "0"}
    two = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
         "-m", "posx", *extend_args(models, tmp_path / "two", *args)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert two.returncode == 0, two.stderr[-3000:]
    (a,) = (tmp_path / "one" / "pretrained").iterdir()
    (b,) = (tmp_path / "two" / "pretrained").iterdir()
    info = json.loads((b / "run.json").read_text())
    assert info["extension"]["engine"] == "fsdp2" and info["extension"]["processes"] == 2
    lora_a = json.loads((a / "run.json").read_text())["extension"]["longlora"]
    assert {k: v for k, v in info["extension"]["longlora"].items() if k != "adapter"} == {
        k: v for k, v in lora_a.items() if k != "adapter"}  # fmt: skip
    loss_a, loss_b = (pd.read_csv(r / "metrics.csv")["loss"] for r in (a, b))
    assert len(loss_b) == 4 and (loss_a - loss_b).abs().max() < 1e-5, (loss_a, loss_b)
    for file in ("model/model.safetensors", "adapter/adapter_model.safetensors",
                 "adapter/trainable_params.safetensors"):  # fmt: skip
        x, y = load_file(a / file), load_file(b / file)
        assert x.keys() == y.keys() and x, file
        for key in x:
            torch.testing.assert_close(y[key], x[key], rtol=1e-4, atol=1e-5, msg=key)
    for file in ("model/config.json", "adapter/adapter_config.json"):
        x, y = (json.loads((r / file).read_text()) for r in (a, b))
        for config in (x, y):  # peft keeps them as a set: written in any order
            config["target_modules"] = sorted(config.get("target_modules") or [])
        assert x == y, file
    base = load_file(models / "llama" / "model.safetensors")
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.allclose(load_file(b / "model" / "model.safetensors")[q], base[q])
    rows_a, rows_b = (pd.read_csv(r / "eval.csv", keep_default_na=False) for r in (a, b))
    assert len(rows_a) == len(rows_b) == 1 and set(rows_b["status"]) == {"ok"}
    for col in ("loss", "ppl"):
        assert abs(rows_a[col][0] - rows_b[col][0]) < 1e-4 * max(1.0, abs(rows_a[col][0])), col
    monkeypatch.setattr(loop, "StopOnInterrupt", _StopAtStepThree)
    stopped = cli(*extend_args(models, tmp_path / "three", *args))
    assert stopped.returncode == 130, stopped.stderr
    monkeypatch.undo()
    (c,) = (tmp_path / "three" / "pretrained").iterdir()
    resumed = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
         "-m", "posx", "resume", str(c)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    x, y = (load_file(r / "model" / "model.safetensors") for r in (a, c))
    for key in x:
        torch.testing.assert_close(y[key], x[key], rtol=1e-4, atol=1e-5, msg=key)
    loss_c = pd.read_csv(c / "metrics.csv")["loss"]
    assert len(loss_c) == 4 and (loss_a - loss_c).abs().max() < 1e-5, (loss_a, loss_c)


class _StopAtStepThree:
    """Ctrl-C during the third of four steps (the loop asks at each step boundary)."""

    checks = 0

    def __init__(self) -> None:
        type(self).checks = 0

    def __enter__(self) -> _StopAtStepThree:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    @property
    def requested(self) -> bool:
        type(self).checks += 1
        return type(self).checks == 4
