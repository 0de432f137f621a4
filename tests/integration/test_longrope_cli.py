"""``posx extend hf:MODEL extension=longrope`` as a user types it: the searched factors are saved
as transformers' ``longrope`` rope_parameters that plain transformers turns into the inverse
frequencies the search scored; the search never returns worse than its starts, reads only the
held-in text, shows its progress and resumes; on a model without RoPE, one line, nothing
written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.integration.test_cli_errors import assert_one_line_error
from tests.integration.test_extend_pretrained_cli import extend_args, models, offline  # noqa: F401

SEARCH = ["extension=longrope", "extend.factor=2", "longrope.population=4", "longrope.parents=2",
          "longrope.mutations=2", "longrope.crossovers=1", "longrope.iterations=2",
          "longrope.step=0.1", "longrope.windows=1", "eval.lengths=[64]"]  # fmt: skip


@pytest.fixture(scope="module")
def searched(models, tmp_path_factory):  # noqa: F811
    """The tiny Llama extended with LongRoPE ×2 (32 -> 64), the search then 4 fine-tuning steps."""
    from tests.conftest import run_in_process

    root = tmp_path_factory.mktemp("longrope")
    done = run_in_process(*extend_args(models, root, *SEARCH))
    assert done.returncode == 0, done.stderr
    (run,) = (root / "pretrained").iterdir()
    return run, done


def test_the_saved_config_reproduces_the_searched_frequencies(searched):
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from posx.encodings.rope_scaling import RopeScaling, base_inv_freq, scaled_inv_freq

    run, _ = searched
    info = json.loads((run / "run.json").read_text())
    found = info["extension"]["longrope"]
    config = AutoConfig.from_pretrained(run / "model")
    params = config.rope_parameters
    assert params["rope_type"] == "longrope" and params["long_factor"] == found["factors"]
    assert params["original_max_position_embeddings"] == 32 and config.max_position_embeddings == 64
    inv, attention = ROPE_INIT_FUNCTIONS["longrope"](config, "cpu", seq_len=64)
    head = config.hidden_size // config.num_attention_heads
    scaling = RopeScaling("longrope", 2.0, 32, factors=tuple(found["factors"]))
    ours = scaled_inv_freq(scaling, 10000.0, head)
    torch.testing.assert_close(inv, ours, rtol=1e-6, atol=0)
    assert attention == pytest.approx(scaling.attention_scale, rel=1e-12)
    short, _ = ROPE_INIT_FUNCTIONS["longrope"](config, "cpu", seq_len=32)
    torch.testing.assert_close(short, base_inv_freq(10000.0, head), rtol=1e-6, atol=0)


def test_the_search_is_never_worse_than_its_starts_and_is_shown(searched):
    run, done = searched
    found = json.loads((run / "run.json").read_text())["extension"]["longrope"]
    assert set(found["starts"]) == {"pi", "ntk", "yarn"}
    assert found["perplexity"] <= min(found["starts"].values())
    factors = found["factors"]
    assert all(1.0 <= a <= b <= 2.0 for a, b in zip(factors, factors[1:], strict=False))
    assert "longrope search iteration 2/2: best perplexity" in done.stderr + done.stdout
    assert json.loads((run / "longrope_search.json").read_text())["iteration"] == 2


def test_the_search_split_is_held_in_text_never_held_out(models):  # noqa: F811
    from transformers import AutoTokenizer

    from posx.pretrained.extend.data import held_in_bytes, tokenize_held_in
    from posx.pretrained.extend.longrope import search_windows
    from posx.pretrained.text import held_out_bytes

    corpus = models / "corpus_split.txt"
    # 10,000 bytes: the held-in 60% all "alpha", the held-out 40% all "omega"
    corpus.write_text("alpha " * 1000 + "omega " * 666 + "end\n")
    size = corpus.stat().st_size
    tok = AutoTokenizer.from_pretrained(models / "llama")
    raw, name = held_in_bytes(str(corpus), 0.4, 10**6, None)
    windows = search_windows(tokenize_held_in(tok, raw, name).ids, 64, 3)
    held_out, _ = held_out_bytes(str(corpus), 0.4, 10**6, None)
    assert len(raw) + len(held_out) == size  # the two parts share no byte
    searched = tok.decode(windows.flatten())
    assert "alpha" in searched and "omega" not in searched and "end" not in searched
    assert searched.strip() in raw.decode()


def test_a_model_without_rope_is_refused_and_nothing_is_written(cli, models, tmp_path):  # noqa: F811
    root = tmp_path / "out"
    result = cli(*extend_args(models, root, *SEARCH, model="gpt2"))
    assert_one_line_error(result, 2, "extension=longrope changes RoPE, but gpt2 has no rotary")
    assert not root.exists()


def test_bad_search_settings_are_one_line(cli, models, tmp_path):  # noqa: F811
    root = tmp_path / "out"
    result = cli(*extend_args(models, root, *SEARCH, "longrope.parents=9"))
    assert_one_line_error(result, 2, "longrope.parents (9) must be at most longrope.population")
    assert not root.exists()


def test_an_interrupted_search_resumes(cli, models, tmp_path, monkeypatch):  # noqa: F811
    import posx.evaluation.longrope_search as search

    root = tmp_path / "out"
    real = search.Search._score
    calls = {"n": 0}

    def stop_in_the_first_iteration(self, factors):
        calls["n"] += 1
        if calls["n"] == 6:  # the 4 of the first population are scored and saved
            raise KeyboardInterrupt
        return real(self, factors)

    monkeypatch.setattr(search.Search, "_score", stop_in_the_first_iteration)
    first = cli(*extend_args(models, root, *SEARCH, "extend.steps=0"))
    assert first.returncode != 0
    (run,) = (root / "pretrained").iterdir()
    state = json.loads((run / "longrope_search.json").read_text())
    assert state["iteration"] == 0 and len(state["seen"]) >= 4
    monkeypatch.setattr(search.Search, "_score", real)
    again = cli("resume", str(run))
    assert again.returncode == 0, again.stderr
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "extended" and info["extension"]["steps"] == 0
    assert json.loads((run / "longrope_search.json").read_text())["iteration"] == 2


def test_search_only_with_no_fine_tuning_saves_the_base_weights(cli, models, tmp_path):  # noqa: F811
    from safetensors.torch import load_file

    root = tmp_path / "out"
    done = cli(*extend_args(models, root, *SEARCH, "extend.steps=0"))
    assert done.returncode == 0, done.stderr
    (run,) = (root / "pretrained").iterdir()
    base = load_file(models / "llama" / "model.safetensors")
    saved = load_file(run / "model" / "model.safetensors")
    assert all(torch.equal(base[k], saved[k]) for k in base)
    assert Path(run / "model" / "config.json").is_file()
