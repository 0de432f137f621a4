"""Damaged, incompatible or newer run files are refused in one line without changing anything;
a diverging run stops with its step and keeps its last good checkpoint; the same config and
seed give identical numbers on CPU.

Training runs in this process (through ``posx.cli.main``, as the console script does) to keep
the suite fast; test_resume.py and test_reliability_kill.py use real subprocesses for signals.
"""

from __future__ import annotations

import io
import json
import math
import re
import shutil
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

TINY = [
    "task=copy",
    "encoding=rope",
    "model.d_model=32",
    "model.n_layers=1",
    "model.n_heads=4",
    "model.d_ff=64",
    "train.length=16",
    "train.steps=30",
    "train.batch_size=8",
    "train.warmup_steps=5",
    "train.log_every=5",
    "train.checkpoint_every=10",
    "train.progress=false",
    "eval.lengths=[16,32]",
    "eval.tokens=256",
]
METRICS = ["loss", "ppl", "acc", "exact_match", "tokens", "sequences"]


def run_cli(*args: str) -> tuple[int, str]:
    """``posx ARGS`` in this process; (exit code, stderr). Usable from module fixtures."""
    from posx.cli import main

    argv, err = sys.argv, io.StringIO()
    sys.argv = ["posx", *args]
    try:
        with redirect_stderr(err), redirect_stdout(io.StringIO()):
            main()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        sys.argv = argv
    return code, err.getvalue()


def train(root: Path, *extra: str) -> tuple[int, str, Path | None]:
    code, err = run_cli("train", *TINY, f"root={root}", *extra)
    runs = [p.parent for p in root.rglob("run.json")]
    assert len(runs) <= 1, runs
    return code, err, runs[0] if runs else None


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("posx: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """One finished tiny run (checkpoint, metrics.csv, eval.csv); tests damage copies of it."""
    code, err, run = train(tmp_path_factory.mktemp("trained"))
    assert code == 0 and run is not None, err
    return run


@pytest.fixture
def run_copy(trained: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "runs" / trained.name))


# --- damaged checkpoints -------------------------------------------------------------------


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGE = {
    "truncated": truncate,
    "garbage": lambda p: p.write_bytes(b"\x13\x37 not a safetensors file " * 8),
    "empty": lambda p: p.write_bytes(b""),
}
CASES = [
    ("eval", "model.safetensors", "truncated", "incomplete metadata, file not fully covered"),
    ("eval", "model.safetensors", "garbage", "truncated or corrupt"),
    ("eval", "model.safetensors", "empty", "header too small"),
    ("eval", "trainer.json", "truncated", "trainer.json of"),
    ("resume", "optimizer.safetensors", "truncated", "optimizer.safetensors of"),
    ("resume", "trainer.safetensors", "garbage", "trainer.safetensors of"),
    ("resume", "model.safetensors", "truncated", "model.safetensors of"),
]


@pytest.mark.parametrize(("command", "name", "damage", "text"), CASES)
def test_damaged_checkpoint_is_refused_and_nothing_changes(run_copy, command, name, damage, text):
    DAMAGE[damage](run_copy / "checkpoint" / name)
    before = snapshot(run_copy)
    args = ["--lengths", "16,64"] if command == "eval" else []
    code, err = run_cli(command, str(run_copy), *args)
    line = one_line(err)
    assert code == 1, err
    assert f"of {run_copy} is truncated or corrupt" in line and text in line, line
    assert snapshot(run_copy) == before  # eval.csv, run.json, metrics.csv: all as they were


def test_eval_under_a_root_skips_a_damaged_run_and_still_fails(trained, tmp_path):
    good = Path(shutil.copytree(trained, tmp_path / "runs" / "good"))
    bad = Path(shutil.copytree(trained, tmp_path / "runs" / "bad"))
    truncate(bad / "checkpoint" / "model.safetensors")
    code, err = run_cli("eval", "--root", str(tmp_path), "--lengths", "64", "--no-progress")
    assert code == 1 and "1 run(s) skipped, damaged or refused: bad" in err, err
    assert 64 in set(pd.read_csv(good / "eval.csv")["eval_length"])  # the good run was done
    assert 64 not in set(pd.read_csv(bad / "eval.csv")["eval_length"])


@pytest.mark.parametrize("how", ["edited config", "eval override"])
def test_checkpoint_from_another_config_is_refused(run_copy, how):
    extra = []
    if how == "edited config":
        config = run_copy / ".hydra" / "config.yaml"
        config.write_text(config.read_text().replace("d_model: 32", "d_model: 64"))
    else:
        extra = ["model.d_model=64"]
    before = snapshot(run_copy)
    code, err = run_cli("eval", str(run_copy), "--lengths", "16", *extra)
    line = one_line(err)
    if how == "edited config":  # the checkpoint's recorded identity names the setting
        assert code == 1 and "config.yaml does not match the checkpoint in" in line, line
        assert "model.d_model is 64 there but 32 in the checkpoint" in line, line
    else:
        assert code == 1 and f"checkpoint in {run_copy} does not fit its config" in line, line
        assert re.search(r"is \[\d+(, \d+)*\] in the checkpoint but \[\d+(, \d+)*\]", line)
    assert snapshot(run_copy) == before


def test_misspelled_eval_override_names_the_keys_there_are(run_copy):
    before = snapshot(run_copy)
    code, err = run_cli("eval", str(run_copy), "encoding.bse=4")
    line = one_line(err)
    assert code == 2, line
    assert "bad eval override 'encoding.bse=4': unknown setting 'encoding.bse'" in line
    assert "did you mean 'encoding.base'? encoding keys: base, rotary_fraction" in line, line
    assert snapshot(run_copy) == before


# --- versions of the files -----------------------------------------------------------------


def test_newer_run_files_are_refused(run_copy):
    info = json.loads((run_copy / "run.json").read_text())
    (run_copy / "run.json").write_text(json.dumps({**info, "schema_version": 99}))
    code, err = run_cli("eval", str(run_copy), "--lengths", "16")
    assert code == 1 and "newer posx (schema 99 > 1); upgrade posx" in one_line(err)

    (run_copy / "run.json").write_text(json.dumps(info))
    state_file = run_copy / "checkpoint" / "trainer.json"
    state_file.write_text(json.dumps({**json.loads(state_file.read_text()), "schema_version": 99}))
    before = snapshot(run_copy)
    code, err = run_cli("eval", str(run_copy), "--lengths", "16")
    line = one_line(err)
    assert code == 1 and "was written by a newer posx (schema 99 > 1); upgrade posx" in line
    assert snapshot(run_copy) == before


def test_report_reads_unversioned_tables_and_refuses_newer_ones(run_copy, tmp_path):
    table = run_copy / "eval.csv"
    frame = pd.read_csv(table)
    assert (frame["schema_version"] == 1).all()
    frame.drop(columns="schema_version").to_csv(table, index=False)  # as before versioning
    code, err = run_cli("report", "--root", str(tmp_path), "--format", "csv")
    assert code == 0, err
    frame.assign(schema_version=99).to_csv(table, index=False)
    code, err = run_cli("report", "--root", str(tmp_path))
    assert code == 1 and "has an unknown schema version (99); upgrade posx" in one_line(err)


def test_unreadable_eval_table_is_never_overwritten(run_copy):
    (run_copy / "eval.csv").write_text("eval_length,loss\n16,1.0\n16,1.0,extra,fields\n")
    before = snapshot(run_copy)
    code, err = run_cli("eval", str(run_copy), "--lengths", "16", "--no-progress")
    line = one_line(err)
    assert code == 1 and f"cannot read {run_copy / 'eval.csv'}" in line, line
    assert "move it aside" in line
    assert snapshot(run_copy) == before


# --- divergence ----------------------------------------------------------------------------


def test_nan_loss_stops_the_run_with_its_step_and_keeps_the_last_checkpoint(tmp_path):
    # A learning rate of 1e30 blows the weights up after one step: no test-only hook needed.
    extra = ["train.lr=1e30", "train.checkpoint_every=1", "train.log_every=1"]
    code, err, run = train(tmp_path, *extra)
    line = one_line(err)
    assert code == 1 and run is not None
    found = re.search(
        r"loss became (nan|inf|-inf) at step (\d+); training stopped, the "
        r"checkpoint of step (\d+) is kept",
        line,
    )
    assert found, line
    step, kept = int(found[2]), int(found[3])
    assert kept == step - 1
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "failed" and info["step"] == step and found[0] in info["error"]
    state = json.loads((run / "checkpoint" / "trainer.json").read_text())
    assert state["step"] == kept
    weights = load_file(str(run / "checkpoint" / "model.safetensors"))
    assert all(torch.isfinite(w).all() for w in weights.values())
    assert pd.read_csv(run / "metrics.csv")["step"].max() < step
    assert not (run / "eval.csv").exists()  # no table of a diverged model


def test_nan_loss_without_periodic_checkpoints_says_so(tmp_path):
    code, err, run = train(tmp_path, "train.lr=1e30", "train.checkpoint_every=0")
    line = one_line(err)
    assert code == 1 and "no checkpoint was saved (train.checkpoint_every=N keeps one)" in line
    assert run is not None and not (run / "checkpoint").exists()


def test_non_finite_weights_never_replace_a_good_checkpoint(tmp_path, monkeypatch):
    """No natural config makes the weights non-finite while the loss stays finite, so the
    optimizer is poisoned after its third step (test-only)."""
    import posx.training.loop

    real = posx.training.loop.make_optimizer

    def poisoned(model, cfg, device):  # noqa: ANN001, ANN202
        optimizer = real(model, cfg, device)
        step, calls = optimizer.step, []

        def step_then_poison(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            out = step(*args, **kwargs)
            calls.append(1)
            if len(calls) == 3:
                with torch.no_grad():
                    next(model.parameters()).fill_(math.nan)
            return out

        optimizer.step = step_then_poison
        return optimizer

    monkeypatch.setattr(posx.training.loop, "make_optimizer", poisoned)
    code, err, run = train(tmp_path, "train.checkpoint_every=1")
    line = one_line(err)
    assert code == 1 and run is not None
    expected = "the weights became non-finite at step 3; training stopped, the checkpoint of step 2"
    assert f"{expected} is kept" in line, line
    assert json.loads((run / "checkpoint" / "trainer.json").read_text())["step"] == 2
    weights = load_file(str(run / "checkpoint" / "model.safetensors"))
    assert all(torch.isfinite(w).all() for w in weights.values())
    assert json.loads((run / "run.json").read_text())["step"] == 3


# --- determinism ---------------------------------------------------------------------------


@pytest.mark.slow  # a second full training and evaluation of the run: ~20 s quiet
def test_same_config_and_seed_give_identical_numbers_on_cpu(trained, tmp_path):
    code, err, again = train(tmp_path / "again")
    assert code == 0 and again is not None, err
    for name, columns in [
        ("metrics.csv", ["step", "loss", "lr", "tokens"]),
        ("eval.csv", ["eval_length", *METRICS]),
        ("eval_positions.csv", ["eval_length", "bucket_start", "tokens", "loss", "acc"]),
    ]:
        a, b = pd.read_csv(trained / name), pd.read_csv(again / name)
        pd.testing.assert_frame_equal(a[columns], b[columns], check_exact=True, obj=name)
    wa = load_file(str(trained / "checkpoint" / "model.safetensors"))
    wb = load_file(str(again / "checkpoint" / "model.safetensors"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)

    code, err, other = train(tmp_path / "other", "seed=1")
    assert code == 0 and other is not None, err
    losses = [pd.read_csv(run / "metrics.csv")["loss"] for run in (trained, other)]
    assert not losses[0].equals(losses[1])  # the comparison above can tell runs apart


def test_nothing_is_ever_unpickled():
    """Checkpoints and caches load through safetensors and JSON only: a results tree from
    elsewhere cannot run code. Guards against a future `torch.load` creeping in."""
    package = Path(__file__).resolve().parents[2] / "posx"
    banned = re.compile(r"torch\.load\(|^\s*import pickle|^\s*from pickle|weights_only\s*=\s*False")
    offenders = [
        f"{path.relative_to(package.parent)}:{n}"
        for path in package.rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if banned.search(line)
    ]
    assert not offenders, offenders
