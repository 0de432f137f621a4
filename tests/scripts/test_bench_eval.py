"""scripts/bench_eval.py: the peak ratio, the docs' table, a real short run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scripts.script_loader import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_eval.py"


@pytest.fixture(scope="module")
def bench_eval():
    return load_script("bench_eval")


RESULTS = [
    {"encoding": "a", "length": 8192, "peak_mb": 400.0, "seconds": 1.0},
    {"encoding": "a", "length": 32768, "peak_mb": 500.0, "seconds": 9.5, "sized_to_length": True},
    {"encoding": "b", "length": 8192, "peak_mb": 400.0, "seconds": 2.0},
    {"encoding": "b", "length": 32768, "error": "out of memory"},
]


def test_ratio_is_peak_at_the_long_length_over_the_short_one(bench_eval):
    ratio = bench_eval.ratios(RESULTS, ["a", "b"], 8192, 32768)
    assert ratio["a"] == pytest.approx(1.25)
    assert math.isnan(ratio["b"])  # a length that did not run has no ratio


def test_markdown_table(bench_eval):
    ratio = bench_eval.ratios(RESULTS, ["a", "b"], 8192, 32768)
    table = bench_eval.markdown(RESULTS, [8192, 32768], ratio, 8192, 32768).splitlines()
    assert table[0] == (
        "| encoding | peak MiB 8k | peak MiB 32k | s at 32k | peak(32k) / peak(8k) |"
    )
    assert table[2] == "| a | 400 | 500* | 9.5 | 1.25 |"
    assert table[3] == "| b | 400 | failed | - | - |"


@pytest.mark.slow
def test_short_run_sizes_a_learned_table_to_the_length(tmp_path):
    out = tmp_path / "runs.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--encodings", "learned,shaw", "--lengths", "512,2048",
         "--ratio", "512,2048", "--threads", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = {(r["encoding"], r["length"]): r for r in json.loads(out.read_text())}
    assert not runs["learned", 512]["sized_to_length"]
    assert (
        runs["learned", 2048]["sized_to_length"] and runs["learned", 2048]["train_length"] == 2048
    )
    assert all(r["peak_mb"] > 0 and r["seconds"] > 0 for r in runs.values())
    assert "peak(2048)/peak(512)" in proc.stdout
