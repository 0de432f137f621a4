"""`posx eval --mode/--window/--stride/--buckets` end to end: rows, positions, bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

TINY = [
    "task=copy",
    "model.d_model=32",
    "model.n_layers=1",
    "model.d_ff=64",
    "train.length=16",
    "train.steps=20",
    "train.batch_size=8",
    "train.progress=false",
    "eval.lengths=[16]",
    "eval.tokens=256",
]


def run_posx(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "POSX_DEBUG": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "posx", *args], env=env, capture_output=True, text=True, timeout=300
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"posx {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def assert_one_line_error(proc, code: int, text: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("posx: error:") and text in lines[0], lines


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """One tiny trained ALiBi copy run shared by this module's tests (they evaluate only),
    trained through ``posx.cli.main`` in this process (no torch import of its own)."""
    from tests.conftest import run_in_process

    root = tmp_path_factory.mktemp("results")
    result = run_in_process("train", *TINY, "encoding=alibi", f"root={root}")
    assert result.returncode == 0, result.stderr
    (run_json,) = root.rglob("run.json")
    return run_json.parent


def read(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, keep_default_na=False)


def evaluate(cli, *args: str):
    out = cli("eval", *args, "--no-progress")
    assert out.returncode == 0, out.stderr
    return out


def test_sliding_rows_and_positions(cli, run):
    out = evaluate(
        cli, str(run), "--lengths", "16,64", "--mode", "sliding", "--stride", "4", "--buckets", "8"
    )
    assert "L=64" in out.stdout
    rows = read(run / "eval.csv")
    slide = rows[rows["mode"] == "sliding"].set_index("eval_length")
    assert slide.loc[64, ["window", "stride"]].tolist() == [16, 4]
    assert slide.loc[16, ["window", "stride"]].tolist() == [16, 16]  # one window = full
    assert (slide["overrides"] == "").all()  # the protocol has its own columns
    full = rows[rows["mode"] == "full"].set_index("eval_length")
    assert slide.loc[16, "loss"] == pytest.approx(full.loc[16, "loss"], rel=1e-6)
    pos = read(run / "eval_positions.csv")
    mine = pos[(pos["mode"] == "sliding") & (pos["eval_length"] == 64)]
    assert set(mine["bucket_end"] - mine["bucket_start"]) == {8}
    assert mine["tokens"].sum() == slide.loc[64, "tokens"]
    weighted = (mine["loss"] * mine["tokens"]).sum() / mine["tokens"].sum()
    assert weighted == pytest.approx(slide.loc[64, "loss"], rel=1e-9)


@pytest.mark.slow
def test_rerun_replaces_and_an_override_adds(run):
    run_posx("eval", str(run), "--lengths", "32", "--no-progress")
    before = len(read(run / "eval.csv"))
    run_posx("eval", str(run), "--lengths", "32", "--no-progress")
    assert len(read(run / "eval.csv")) == before
    run_posx("eval", str(run), "--lengths", "32", "eval.seed=9", "--no-progress")
    rows = read(run / "eval.csv")
    assert len(rows) == before + 1 and "eval.seed=9" in set(rows["overrides"])


BAD = [
    (["--mode", "overlap"], "--mode must be full or sliding"),
    (["--mode", "full", "--window", "8"], "--window and --stride apply to --mode sliding"),
    (["--mode", "sliding", "--window", "0"], "eval.window must be a positive number"),
    (["--mode", "sliding", "--window", "8", "--stride", "9"], "must not exceed the window"),
    (["--stride", "4"], "eval.stride applies to eval.mode=sliding only"),
    (["--buckets", "wide"], "eval buckets must be 'log' or a positive width"),
]


@pytest.mark.parametrize(("args", "text"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_protocol_input_is_one_line_and_writes_nothing(cli, run, args, text):
    before = (run / "eval.csv").read_bytes(), (run / "eval_positions.csv").read_bytes()
    assert_one_line_error(cli("eval", str(run), "--lengths", "16", *args), 2, text)
    assert ((run / "eval.csv").read_bytes(), (run / "eval_positions.csv").read_bytes()) == before


def test_a_failed_length_prints_its_reason_and_exits_1(cli, run, monkeypatch):
    """A length that fails (out of memory, a bug) is never a silent exit 0."""
    import posx.evaluation.sweep

    real = posx.evaluation.sweep.evaluate_length

    def fail_at_32(model, task, data, protocol, *args, **kwargs):  # noqa: ANN001, ANN202
        if data.inputs.shape[1] == 32:
            raise RuntimeError("out of memory: tried to allocate 9 GiB")
        return real(model, task, data, protocol, *args, **kwargs)

    monkeypatch.setattr(posx.evaluation.sweep, "evaluate_length", fail_at_32)
    out = cli("eval", str(run), "--lengths", "16,32", "--no-progress")
    assert out.returncode == 1, out.stderr
    assert "L=32 (full): out of memory: tried to allocate 9 GiB" in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("posx: error: 1 evaluation(s) failed")
    rows = read(run / "eval.csv")
    rows = rows[(rows["mode"] == "full") & (rows["overrides"] == "")].set_index("eval_length")
    assert rows.loc[32, "status"] == "failed" and rows.loc[16, "status"] == "ok"


@pytest.mark.slow
def test_an_unsupported_length_is_not_a_failure(cli, tmp_path):
    """`learned` cannot represent positions past max_len: documented, exit 0."""
    run_posx("train", *TINY, "encoding=learned", f"root={tmp_path}")
    (run_json,) = tmp_path.rglob("run.json")
    out = cli("eval", str(run_json.parent), "--lengths", "16,64", "--no-progress")
    assert out.returncode == 0, out.stderr
    assert read(run_json.parent / "eval.csv").set_index("eval_length").loc[64, "status"] == (
        "unsupported"
    )
