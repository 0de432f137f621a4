"""Runs written by an earlier posx (tests/fixtures/legacy, made before issue 29's move) still
evaluate to the same numbers, resume, report and check through the CLI a user types."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "legacy" / "results"
KEYS = ["eval_length", "mode", "window", "stride", "overrides"]


@pytest.fixture
def legacy_root(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    shutil.copytree(FIXTURE, root)
    return root


def run_of(root: Path, seed: int) -> Path:
    (run,) = (root / "runs").glob(f"text_rope_L16_s{seed}_*")
    return run


def read_rows(path: Path) -> pd.DataFrame:
    return (
        pd.read_csv(path, keep_default_na=False, na_values=[""], dtype={"overrides": str})
        .fillna({"overrides": ""})
        .set_index(KEYS)
    )


@pytest.mark.slow  # re-evaluates the stored runs: ~11 s; report and check stay default
def test_legacy_run_evaluates_to_its_recorded_numbers(posx, legacy_root):
    run = run_of(legacy_root, 0)
    before = read_rows(run / "eval.csv")
    (run / "eval.csv").unlink()
    posx("eval", str(run), "--lengths", "16,64", check=True)
    after = read_rows(run / "eval.csv")
    assert len(after) == 2
    common = before.loc[after.index]
    assert list(after["status"]) == ["ok", "ok"]
    for metric in ("loss", "bpb", "acc"):
        assert after[metric].to_numpy() == pytest.approx(common[metric].to_numpy(), rel=1e-6)


@pytest.mark.slow  # resumes a stored run to step 400: ~40 s quiet, the longest default test
def test_legacy_interrupted_run_resumes(posx, legacy_root):
    run = run_of(legacy_root, 1)
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    posx("resume", str(run), check=True)
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "trained"
    assert json.loads((run / "checkpoint" / "trainer.json").read_text())["step"] == 400
    assert (run / "eval.csv").is_file()


def test_legacy_root_reports_and_checks(posx, legacy_root):
    report = posx("report", "--root", str(legacy_root), check=True)
    assert "rope+yarn×4" in report.stdout and "7.877" in report.stdout
    check = posx("check", str(legacy_root))
    # one finished seed: every claim is measured but inconclusive (exit 3), never an error
    assert check.returncode == 3, check.stderr
    assert "0 of 4 claims hold, 0 fail, 4 inconclusive" in check.stderr + check.stdout
    assert "7.877" in check.stdout
