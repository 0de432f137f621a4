"""A user's path through the CLI: train -> eval -> report, a 2-encoding sweep, list."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest


def only_run(root: Path) -> Path:
    runs = [p.parent for p in root.rglob("run.json")]
    assert len(runs) == 1, runs
    return runs[0]


def test_train_eval_report(posx, cli, tiny_overrides, tmp_path):
    """Training in a subprocess, as a user runs it; then eval, report and resume of that run
    through the same entry point (posx.cli.main) in this process."""

    def ok(*args: str):
        result = cli(*args)
        assert result.returncode == 0, result.stderr
        return result

    # stdout is a pipe here (as under SLURM): progress is plain lines, one per logged step
    progress = ["train.progress=true", "train.progress_every=0"]
    out = posx("train", "encoding=alibi", *tiny_overrides, *progress, check=True).stdout
    run = only_run(tmp_path)
    lines = out.splitlines()
    assert lines[0] == f"run directory: {run}"
    assert [x.split("(")[0].strip() for x in lines if x.startswith("step ")] == [
        "step 10/30", "step 20/30", "step 30/30"
    ]  # fmt: skip
    assert all(" loss " in x and " lr " in x and " grad " in x and " tok/s" in x
               for x in lines if x.startswith("step "))  # fmt: skip
    assert "\r" not in out and "\x1b[" not in out  # no live bar, no terminal codes
    summary = lines[lines.index(f"done: {run}") :]
    assert summary[1].startswith("trained in ") and summary[2].startswith("eval: exact match")
    assert summary[3].startswith("  L=16  ") and summary[4].startswith("  L=32  ")
    assert summary[5] == "next:" and summary[6].startswith(f"  posx report --root {tmp_path}")
    log = (run / "posx.log").read_text()  # the run's own log holds all of it, timestamped
    for text in (f"run directory: {run}", "step 30/30", f"done: {run}", "L=32", "posx report"):
        assert text in log, text
    assert run.parent == tmp_path / "runs" and run.name.startswith("copy_alibi_L16_s0_")
    assert (run / ".hydra" / "config.yaml").is_file()
    assert (run / "checkpoint" / "model.safetensors").is_file()
    metrics = pd.read_csv(run / "metrics.csv")
    assert list(metrics["step"]) == [10, 20, 30]
    assert metrics["loss"].iloc[-1] < metrics["loss"].iloc[0]
    info = json.loads((run / "run.json").read_text())
    assert info["encoding"] == "alibi" and info["status"] == "trained"

    # training already evaluated at eval.lengths; eval adds a length and replaces the others
    out = ok("eval", str(run), "--lengths", "16,32,64")
    assert "L=64" in out.stdout
    rows = pd.read_csv(run / "eval.csv")
    assert sorted(rows["eval_length"]) == [16, 32, 64]
    assert set(rows["status"]) == {"ok"} and set(rows["mode"]) == {"full"}
    assert rows["exact_match"].between(0, 1).all() and (rows["tokens"] > 0).all()

    # an eval-time override is a separate row, recorded as such
    ok("eval", str(run), "--lengths", "16", "eval.seed=7")
    rows = pd.read_csv(run / "eval.csv", keep_default_na=False)
    assert len(rows) == 4 and "eval.seed=7" in set(rows["overrides"])

    csv = ok("report", "--root", str(tmp_path), "--format", "csv", "--metric", "loss")
    table = pd.read_csv(io.StringIO(csv.stdout), keep_default_na=False)
    assert set(table["variant"]) == {"alibi", "alibi+eval.seed=7"}
    assert (table["n"] == 1).all()
    md = ok("report", "--root", str(tmp_path), "--format", "md").stdout
    assert "| alibi (not learned) |" in md and "L=64" in md  # 30 steps do not learn copy
    md = cli("report", "--root", str(tmp_path), "--format", "md", "--learned", "0").stdout
    assert "| alibi |" in md

    # resuming a finished run says so, and draws no progress bar
    before = (run / "run.json").read_text()
    resumed = ok("resume", str(run))
    assert "already finished: trained 30 of 30 steps and evaluated" in resumed.stdout
    assert "nan" not in resumed.stdout + resumed.stderr and "tok/s" not in resumed.stdout
    assert (run / "run.json").read_text() == before


@pytest.mark.slow
def test_sweep_of_two_encodings(posx, tiny_overrides, tmp_path):
    out = posx("train", "-m", "encoding=nope,rope", *tiny_overrides, check=True).stdout
    (sweep,) = (tmp_path / "sweeps").iterdir()
    lines = out.splitlines()
    assert lines[0] == f"sweep directory: {sweep}"  # before the first job starts
    assert f"sweep done: 2 job(s) in {sweep}" in lines
    assert f"  posx report --root {sweep}    # compare the sweep's runs" in lines
    runs = sorted(p.parent.name for p in (tmp_path / "sweeps").rglob("run.json"))
    assert len(runs) == 2 and runs[0].startswith("copy_nope_") and runs[1].startswith("copy_rope_")
    out = posx("report", "--root", str(tmp_path), "--format", "csv", check=True).stdout
    table = pd.read_csv(io.StringIO(out))
    assert set(table["variant"]) == {"nope", "rope"} and set(table["metric"]) == {"exact_match"}


@pytest.mark.slow
def test_learned_is_unsupported_past_its_table(posx, tiny_overrides, tmp_path):
    posx("train", "encoding=learned", *tiny_overrides, check=True)
    rows = pd.read_csv(only_run(tmp_path) / "eval.csv", keep_default_na=False)
    by_len = rows.set_index("eval_length")
    assert by_len.loc[16, "status"] == "ok"
    assert by_len.loc[32, "status"] == "unsupported" and "16 positions" in by_len.loc[32, "reason"]
    out = posx("report", "--root", str(tmp_path), check=True).stdout
    assert "unsupported" in out


def test_list_shows_every_encoding_with_description(posx):
    out = posx("list", "encoding", check=True).stdout
    for name in ("nope", "sinusoidal", "learned", "rope", "alibi", "t5"):
        assert name in out
    assert "(Press et al." in posx("list", "encoding", "alibi", check=True).stdout
