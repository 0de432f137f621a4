"""scripts/bench_extend_gpu.py: the verdict against the preflight, the time budget's skips, the
docs' table, and the script itself on a CPU (tiny shapes, the real `posx extend hf:` path)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.scripts.script_loader import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_extend_gpu.py"


@pytest.fixture(scope="module")
def bench():
    return load_script("bench_extend_gpu")


def run_script(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--out", str(out), *args],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    path = out / "bench_extend.csv"
    rows = list(csv.DictReader(path.open())) if path.is_file() else []
    return proc, rows


def test_verdict_holds_the_peak_to_twenty_percent_of_the_estimate(bench):
    gib = 2**30
    assert bench.verdict(20 * gib, 23 * gib, "H100") == (1.15, "within 20% (over by 15%)")
    assert bench.verdict(20 * gib, 17 * gib, "H100")[1] == "within 20% (under by 15%)"
    ratio, text = bench.verdict(20 * gib, 25 * gib, "H100")
    assert ratio == 1.25 and text == "NOT within 20%: peak over the estimate by 25%"
    assert bench.verdict(20 * gib, 10 * gib, "H100")[1].startswith("NOT within 20%: peak under")
    assert bench.verdict(20 * gib, None, "cpu") == (
        None, "not compared: no CUDA allocator statistics on cpu"
    )  # fmt: skip


def test_a_job_that_would_overrun_the_budget_is_skipped_with_the_reason(bench):
    pace = bench.Pace()
    assert pace.predict("run", 100) is None  # nothing seen yet: start it
    pace.record("run", 100, 30.0)
    assert pace.predict("run", 400) == 120.0  # in proportion to its work
    assert bench.skip_reason(200.0, 120.0, "m at 16384") is None
    assert bench.skip_reason(100.0, 120.0, "m at 16384") == (
        "skipped: m at 16384 would take about 120 s, 100 s of budget left"
    )
    assert bench.skip_reason(-1.0, None, "building m") == (
        "skipped: the time budget was spent before building m"
    )


def test_a_run_past_the_budget_is_stopped_and_its_row_says_so(bench, tmp_path):
    args = SimpleNamespace(steps=2, device="cpu", corpus_bytes=1000, workdir=tmp_path, trained=32)
    result = bench.measure(tmp_path / "model", 64, 32, 1.0, args)  # python alone takes longer
    assert result == {"stopped": "stopped at the time budget, after 1 s"}
    row = bench.row_of("m", 5, 64, result, args)
    assert (row["status"], row["note"]) == ("stopped", "stopped at the time budget, after 1 s")


def test_markdown_table_says_why_a_row_was_not_measured(bench):
    rows = [
        {"model": "m", "status": "measured", "params": 5, "length": 8192, "tokens_per_s": 900,
         "s_per_step": 9.1, "estimate_gib": 20.0, "peak_allocated_gib": 19.0,
         "peak_reserved_gib": 21.0, "reserved_over_estimate": 1.05,
         "verdict": "within 20% (over by 5%)"},
        {"model": "m", "status": "skipped", "params": 5, "length": 16384,
         "note": "skipped: budget"},
    ]  # fmt: skip
    table = bench.markdown(rows, "Device: X").splitlines()
    assert table[0] == "Device: X"
    assert table[2].startswith("| model | parameters | length | tokens/s |")
    assert (
        table[4]
        == "| m | 5 | 8192 | 900 | 9.1 | 20.0 | 19.0 | 21.0 | 1.05 | within 20% (over by 5%) |"
    )
    assert table[5] == "| m | 5 | 16384 | - | - | - | - | - | - | skipped: budget |"


def test_real_shapes_are_the_published_models(bench):
    from tests.unit.pretrained.tiny_models import byte_level_tokenizer

    tokenizer = byte_level_tokenizer()
    counts = {name: bench.parameters(bench.model_config(name, 4096, tokenizer))
              for name in ("qwen2-0.5b", "llama-3.2-1b")}  # fmt: skip
    assert counts == {"qwen2-0.5b": 494_032_768, "llama-3.2-1b": 1_235_814_400}


def test_no_budget_skips_every_row_and_still_writes_the_table(tmp_path):
    proc, rows = run_script(tmp_path, "--budget", "0")
    assert proc.returncode == 0, proc.stderr
    assert [(r["length"], r["status"]) for r in rows] == [("64", "skipped"), ("128", "skipped")]
    assert rows[0]["note"] == "skipped: the time budget was spent before building tiny-qwen2"
    assert int(rows[0]["params"]) > 0  # known without building it
    table = (tmp_path / "out" / "bench_extend.md").read_text()
    assert table.startswith("Device: CPU (") and "| skipped: the time budget" in table


@pytest.mark.slow
def test_tiny_extension_on_the_cpu_measures_each_length(tmp_path):
    proc, rows = run_script(tmp_path, "--tiny", "--steps", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [r["length"] for r in rows] == ["64", "128"]
    for row in rows:
        assert row["status"] == "measured" and row["device"] == "cpu"
        assert row["precision"] == "fp32" and row["checkpointing"] == "True"
        assert float(row["tokens_per_s"]) > 0 and float(row["estimate_gib"]) > 0
        assert row["estimate_parts"].startswith("states ") and row["peak_reserved_gib"] == ""
        assert row["verdict"] == "not compared: no CUDA allocator statistics on cpu"


@pytest.mark.slow
def test_a_refused_extension_is_a_failed_row_and_exit_1(tmp_path):
    proc, rows = run_script(tmp_path, "--tiny", "--lengths", "64", "--corpus-bytes", "40")
    assert proc.returncode == 1
    (row,) = rows
    assert row["status"] == "failed"
    assert row["note"].startswith("posx: error: the held-in text of stdlib has")


def test_each_row_is_written_as_it_finishes(bench, monkeypatch, tmp_path):
    """A run killed at a device's time limit keeps the rows measured before it."""
    written: list[int] = []

    def fake_measure(directory, length, trained, left, args):
        if length == 128:  # the second length: the tables already hold the first
            written.append(len(list(csv.DictReader((args.out / "bench_extend.csv").open()))))
        return {"skipped": f"fake {length}"}

    monkeypatch.setattr(bench, "measure", fake_measure)
    monkeypatch.setattr(bench, "save_model", lambda config, tokenizer, directory: None)
    args = bench.parse_args(["--device", "cpu", "--out", str(tmp_path / "out")])
    args.workdir = tmp_path / "work"
    bench.run_all(args)
    assert written == [1]
    assert "fake 64" in (tmp_path / "out" / "bench_extend.md").read_text()
