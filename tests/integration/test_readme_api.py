"""The README's Python example runs as written: its code block is this test's input."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
pytestmark = pytest.mark.slow  # trains and evaluates in process: 4-13 s on a busy 2-core machine


def test_readme_python_example_runs(doc_blocks, tmp_path, monkeypatch, capsys):
    blocks = doc_blocks(README, "From Python")
    (code,) = [code for info, code in blocks if info == "python"]
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    run, rows, df = scope["run"], scope["rows"], scope["df"]
    assert run.parent == tmp_path / "results" / "runs" and run.name.startswith("copy_alibi_L16_s0_")
    assert json.loads((run / "run.json").read_text())["status"] == "trained"
    assert list(rows["eval_length"]) == [16, 32, 64] and set(rows["status"]) == {"ok"}
    assert set(df["encoding"]) == {"alibi"} and sorted(df["eval_length"]) == [16, 32, 64]
    assert pd.read_csv(run / "eval.csv")["eval_length"].tolist() == [16, 32, 64]
    assert "alibi" in capsys.readouterr().out  # the printed pivot and report table
    table = scope["table"]  # posx.report's summary: one row per eval length of the one run
    assert isinstance(table, pd.DataFrame) and set(table["encoding"]) == {"alibi"}
    assert sorted(table["eval_length"]) == [16, 32, 64] and table["mean"].notna().all()
    assert "alibi" in (tmp_path / "report.html").read_text()
