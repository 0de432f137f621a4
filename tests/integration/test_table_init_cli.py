"""A learned position table's initial scale (``encoding.init_std``) through ``posx train``: the
setting reaches the table that training starts from, its default is the 0.02 every saved run
used, and a bad value is one line, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors.torch import load_file

# A few steps at a learning rate too small to move a weight visibly: the table the checkpoint
# holds is (to 1e-3) the one initialisation made.
SMALL = [
    "task=arithmetic",
    "model.d_model=32",
    "model.n_heads=2",
    "model.n_layers=1",
    "model.d_ff=32",
    "train.length=3",
    "train.steps=2",
    "train.batch_size=4",
    "train.warmup_steps=1",
    "train.lr=1e-6",
    "train.threads=1",
    "train.progress=false",
    "eval.lengths=[3]",
    "eval.tokens=64",
    "seed=0",
]
ARMS = {
    "learned": ["positions=coupling", "encoding=learned"],
    "abacus": ["positions=abacus", "encoding=abacus"],
}


def table_std(root: Path) -> float:
    (weights,) = root.rglob("checkpoint/model.safetensors")
    tables = {k: v for k, v in load_file(weights).items() if k.endswith("table.weight")}
    assert len(tables) == 1, sorted(tables)
    return float(next(iter(tables.values())).std())


@pytest.mark.parametrize("arm", sorted(ARMS))
@pytest.mark.parametrize(("setting", "expected"), [([], 0.02), (["encoding.init_std=1.0"], 1.0)])
def test_init_std_is_the_scale_the_table_starts_from(cli, tmp_path, arm, setting, expected):
    result = cli("train", *ARMS[arm], *SMALL, *setting, f"root={tmp_path}")
    assert result.returncode == 0, result.stderr
    assert table_std(tmp_path) == pytest.approx(expected, rel=0.1)


@pytest.mark.parametrize("arm", sorted(ARMS))
@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_a_bad_init_std_is_one_line_and_writes_nothing(cli, tmp_path, arm, value):
    result = cli("train", *ARMS[arm], *SMALL, f"encoding.init_std={value}", f"root={tmp_path}")
    assert result.returncode == 2, result.stderr
    assert "init_std" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.rglob("run.json"))


# Untied, so the checkpoint holds the token embedding under its own name.
UNTIED = [*ARMS["learned"], "model.tie_embeddings=false"]


def weight_std(root: Path, name: str) -> float:
    (weights,) = root.rglob("checkpoint/model.safetensors")
    return float(load_file(weights)[name].std())


@pytest.mark.parametrize(("setting", "expected"), [([], 0.02), (["model.embed_init_std=1.0"], 1.0)])
def test_embed_init_std_is_the_scale_the_token_embedding_starts_from(
    cli, tmp_path, setting, expected
):
    result = cli("train", *UNTIED, *SMALL, *setting, f"root={tmp_path}")
    assert result.returncode == 0, result.stderr
    assert weight_std(tmp_path, "tok.weight") == pytest.approx(expected, rel=0.15)


def test_a_bad_embed_init_std_is_one_line_and_writes_nothing(cli, tmp_path):
    result = cli("train", *UNTIED, *SMALL, "model.embed_init_std=0", f"root={tmp_path}")
    assert result.returncode == 2, result.stderr
    assert "embed_init_std > 0" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.rglob("run.json"))


def test_the_default_draws_the_weights_it_always_did(cli, tmp_path):
    """``embed_init_std`` unset draws nothing more, so a saved run retrains to its weights:
    an explicit 0.02 (a second draw) gives another embedding from the same seed."""
    cli("train", *UNTIED, *SMALL, f"root={tmp_path / 'a'}")
    cli("train", *UNTIED, *SMALL, "model.embed_init_std=0.02", f"root={tmp_path / 'b'}")
    (a,), (b,) = (list((tmp_path / r).rglob("checkpoint/model.safetensors")) for r in "ab")
    assert not load_file(a)["tok.weight"].equal(load_file(b)["tok.weight"])
