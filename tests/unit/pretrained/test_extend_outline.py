"""``posx extend hf:DIR --dry-run``'s plan from the model's files alone
(:func:`posx.pretrained.extend.outline.draft_plan`): the same lines, estimate and refusals as
the plan built with transformers on the meta device, None where it cannot tell, and a damaged
safetensors header or index named in one line."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from posx.errors import ConfigError
from posx.pretrained.extend.outline import draft_plan
from posx.pretrained.extend.plan import make_plan
from posx.pretrained.extend.settings import Options, parse_settings
from posx.pretrained.header import read_header, read_tensors
from posx.runs.resources import available_bytes
from posx.runtime.distributed import World
from tests.unit.pretrained.tiny_models import save_model

DRY = Options(dry_run=True)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    """Tiny llama, qwen2 (biases), mistral, a llama with tied embeddings and no head_dim, and
    llama and qwen2 configs as older transformers wrote them."""
    import torch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("outline")
    for kind in ("llama", "qwen2", "mistral"):
        save_model(kind, root / kind)
    tied = save_model("llama", root / "tied", tie_word_embeddings=True)
    cfg = json.loads((tied / "config.json").read_text())
    cfg.pop("head_dim")
    (tied / "config.json").write_text(json.dumps(cfg))
    # as older transformers wrote them: rope_theta (a float, an int), no rope_parameters
    for kind, theta in (("llama", 500000.0), ("qwen2", 1000000)):
        old = Path(shutil.copytree(root / kind, root / f"old_{kind}"))
        cfg = json.loads((old / "config.json").read_text())
        cfg.pop("rope_parameters")
        (old / "config.json").write_text(json.dumps({**cfg, "rope_theta": theta}))
    return root


def both(model: Path, *words: str):
    values = parse_settings(list(words))
    word = f"hf:{model}"
    return draft_plan(word, values, DRY), make_plan(word, values, DRY, World())


@pytest.mark.parametrize("kind", ["llama", "qwen2", "mistral", "tied", "old_llama", "old_qwen2"])
@pytest.mark.parametrize(
    "words",
    [
        ["extension=yarn"],
        ["extension=pi", "extend.factor=2", "train.checkpointing=true"],
        ["extension=llama3", "extend.factor=8", "train.micro_batch=2"],
        ["extension=pose", "extend.factor=2"],
        ["extension=control"],
        ["extension=plain", "extend.length=96", "extend.factor=3", "train.precision=bf16"],
        ["extension=yarn", "train.device=cuda", "train.world_size=8", "train.max_memory=80G",
         "train.checkpointing=true"],
    ],
)  # fmt: skip
def test_the_draft_says_what_the_full_plan_says(models, kind, words):
    draft, plan = both(models / kind, *words)
    assert draft is not None
    assert draft.outline.lines() == plan.lines()
    assert (draft.shape, draft.layout, draft.outline.parts) == (plan.shape, plan.layout, plan.parts)
    assert draft.outline.params == sum(p.numel() for p in _meta(plan).parameters())
    if not plan.values["train.max_memory"]:  # the room is looked up on the same device
        assert (draft.free() is None) == (available_bytes(plan.device) is None)


def _meta(plan):
    import torch
    import transformers

    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(plan.config)


@pytest.mark.parametrize(
    ("words", "said"),
    [
        (["extension=yarn", "extend.factor=1"], "extend.length=32 is not longer than the "
                                                "trained context"),
        (["extension=pose", "extend.factor=1"], "extend.length=32 is not longer"),
        (["extension=yarn", "train.world_size=3"], "must be a multiple of the 3 process(es)"),
    ],
)  # fmt: skip
def test_the_draft_refuses_what_the_full_plan_refuses(models, words, said):
    values = parse_settings(words)
    word = f"hf:{models / 'llama'}"
    with pytest.raises(ConfigError) as draft:
        draft_plan(word, values, DRY)
    with pytest.raises(ConfigError) as plan:
        make_plan(word, values, DRY, World())
    assert str(draft.value) == str(plan.value) and said in str(draft.value)


def _edit_config(models: Path, tmp_path: Path, **changes) -> Path:
    copy = Path(shutil.copytree(models / "llama", tmp_path / "copy"))
    cfg = json.loads((copy / "config.json").read_text())
    cfg.update(changes)
    (copy / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if v != "-"}))
    return copy


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("no weights", ["extension=yarn"]),
        ("old rope_scaling", ["extension=yarn"]),
        ("a scaled base", ["extension=yarn"]),
        ("no intermediate_size", ["extension=yarn"]),
        ("eager attention", ["extension=yarn"]),
        ("quantized", ["extension=yarn"]),
        ("unknown family", ["extension=yarn"]),
        ("a header of other layers", ["extension=yarn"]),
        ("ntk", ["extension=ntk"]),
        ("longlora", ["extension=longlora"]),
        ("a GPU's free memory", ["extension=yarn", "train.device=cuda"]),
    ],
)  # fmt: skip
def test_the_draft_leaves_to_the_full_plan_what_it_cannot_tell(models, tmp_path, case, words):
    model = {
        "no weights": lambda: _without_weights(models, tmp_path),
        "old rope_scaling": lambda: _edit_config(models, tmp_path, rope_parameters="-",
                                                 rope_scaling={"type": "linear", "factor": 2.0}),
        "a scaled base": lambda: _edit_config(models, tmp_path, rope_parameters={
            "rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}),
        "no intermediate_size": lambda: _edit_config(models, tmp_path, intermediate_size="-"),
        "eager attention": lambda: _edit_config(models, tmp_path, _attn_implementation="eager"),
        "quantized": lambda: _edit_config(models, tmp_path, quantization_config={"bits": 4}),
        "unknown family": lambda: _edit_config(models, tmp_path, model_type="gemma"),
        "a header of other layers": lambda: _edit_config(models, tmp_path, num_hidden_layers=3),
    }.get(case, lambda: models / "llama")()  # fmt: skip
    assert draft_plan(f"hf:{model}", parse_settings(words), DRY) is None


def _without_weights(models: Path, tmp_path: Path) -> Path:
    bare = Path(shutil.copytree(models / "llama", tmp_path / "bare"))
    (bare / "model.safetensors").unlink()
    return bare


def test_torchrun_processes_are_left_to_the_full_plan(models, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert draft_plan(f"hf:{models / 'llama'}", parse_settings(["extension=yarn"]), DRY) is None


def test_a_header_reads_as_safetensors_reads_it(models):
    from safetensors import safe_open

    tensors = read_tensors(models / "qwen2")
    with safe_open(str(models / "qwen2" / "model.safetensors"), "pt") as f:
        assert set(tensors) == set(f.keys())
        for name in f.keys():  # noqa: SIM118 - a safe_open handle has no __iter__
            assert tensors[name].shape == tuple(f.get_slice(name).get_shape())


def _header(file: Path, header: bytes, size: int | None = None) -> Path:
    file.write_bytes(struct.pack("<Q", len(header) if size is None else size) + header + b"\0" * 8)
    return file


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (lambda f: f.write_bytes(b"\1\2"), "shorter than a safetensors header"),
        (lambda f: _header(f, b"{}", size=10**6), "its header says 1000000 bytes; the file holds"),
        (lambda f: _header(f, b"{not json"), "its header is not JSON"),
        (lambda f: _header(f, b"[1, 2]"), "its header is not a JSON object"),
        (lambda f: _header(f, b'{"w": {"dtype": 7, "shape": [2], "data_offsets": [0, 8]}}'),
         "tensor 'w' has dtype 7"),
        (lambda f: _header(f, b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}'),
         "tensor 'w' does not lie where its header says"),
        (lambda f: _header(f, b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}'),
         "tensor 'w' does not lie where its header says"),
        (lambda f: _header(f, b'{"w": {"dtype": "F32", "shape": "2", "data_offsets": [0, 8]}}'),
         "tensor 'w' has no valid shape and offsets"),
    ],
)  # fmt: skip
def test_a_damaged_header_is_named_in_one_line(tmp_path, content, said):
    file = tmp_path / "model.safetensors"
    content(file)
    with pytest.raises(ConfigError) as err:
        read_header(file)
    assert str(err.value).startswith(f"{file} is damaged (") and said in str(err.value)
    assert "\n" not in str(err.value)
    _header(file, b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}')
    assert read_header(file)["w"].numel == 2
    _header(file, b'{"w": {"dtype": "F99", "shape": [3], "data_offsets": [0, 8]}}')
    assert read_header(file)["w"].numel == 3  # a dtype newer than posx: taken as written


def test_a_sharded_model_is_read_through_its_index(models, tmp_path):
    copy = Path(shutil.copytree(models / "llama", tmp_path / "sharded"))
    whole = read_tensors(copy)
    index = copy / "model.safetensors.index.json"
    shard = "model-00001-of-00001.safetensors"
    (copy / "model.safetensors").rename(copy / shard)
    index.write_text(json.dumps({"weight_map": dict.fromkeys(whole, shard)}))
    assert read_tensors(copy) == whole
    index.write_text("{")
    with pytest.raises(ConfigError, match=f"{index} is damaged"):
        read_tensors(copy)
    index.write_text(json.dumps({"weight_map": {"w": "gone.safetensors"}}))
    with pytest.raises(ConfigError, match="names gone.safetensors, which is not in"):
        read_tensors(copy)
