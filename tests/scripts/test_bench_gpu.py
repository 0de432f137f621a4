"""scripts/bench_gpu.py: its CPU run (tiny shapes) is its test; targets, budget, bad input."""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_gpu.py"


@pytest.fixture(scope="module")
def bench_gpu():
    spec = importlib.util.spec_from_file_location("posx_bench_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["posx_bench_gpu"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    module._SHAPES.update({s.name: s for s in module.TINY_SHAPES})
    return module


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow  # ~15-20 s: every encoding twice; CI runs it with make test-slow
def test_the_cpu_run_writes_every_cell_and_the_table(tmp_path):
    """What `make bench-gpu` runs, unchanged, on the CPU: tiny shapes chosen by itself, every
    cell of both shapes a row (timed or saying why not), the table with the targets marked."""
    proc = run(
        "--encodings", "nope,alibi,learned", "--threads", "1", "--budget", "30",
        "--sample-seconds", "0.001", "--rounds", "2", "--out", str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = pd.read_csv(tmp_path / "bench_gpu.csv")
    assert set(data["shape"]) == {"gpt2", "small"} and set(data.device.str[:3]) == {"cpu"}
    cells = pd.read_csv(tmp_path / "cells.csv").set_index(["shape", "encoding", "phase", "length"])
    # gpt2 (tiny): train 32, 64; eval 128, 256; peak at 64
    for enc in ("nope", "alibi"):
        for phase, length in (("train", 32), ("train", 64), ("eval", 128), ("eval", 256)):
            row = cells.loc[("gpt2", enc, phase, length)]
            assert 0.05 < row.vs_reference < 20 and row.tokens_per_s > 0, (enc, phase, length)
            assert row.peak_mb > 0 and row.reference_peak_mb > 0
        assert cells.loc[("gpt2", enc, "peak", 64)].peak_mb > 0
        assert cells.loc[("gpt2", enc, "eval", 256)].peak_ratio > 0
    assert cells.loc[("gpt2", "alibi", "eval", 256)].vs_alibi_time == pytest.approx(1.0)
    assert cells.loc[("gpt2", "nope", "train", 32)].target == 0.95
    assert cells.loc[("gpt2", "alibi", "train", 32)].target == 0.8
    assert cells.loc[("gpt2", "alibi", "eval", 128)].target == 0.8
    assert math.isnan(cells.loc[("small", "alibi", "train", 32)].target)  # recorded beside
    # learned was built at the longest training length (64): past it, a row saying so
    assert "unsupported past 64" in cells.loc[("gpt2", "learned", "eval", 128)].note
    table = (tmp_path / "table.md").read_text()
    assert table.startswith("Device: cpu") and "| nope |" in table and "**small**" in table
    assert "256 ÷ alibi time" in table and "peak ratio" in table
    assert "✓" in table or "✗" in table
    assert table in proc.stdout


def rows(bench_gpu, enc: str, phase: str, length: int, seconds: float, **extra) -> list[dict]:
    """Two rounds of one cell of the tiny gpt2 shape, the reference at 1 s a call."""
    base = {"shape": "gpt2", "encoding": enc, "phase": phase, "length": length, "batch": 1}
    base |= {"bias_encoding": enc != "nope", "attend_encoding": False, "note": ""}
    base |= {"peak_mb": 100.0, "reference_peak_mb": 90.0} | extra
    return [{**base, "round": r, "seconds": seconds, "reference_seconds": 1.0} for r in (0, 1)]


def test_targets_and_the_longest_lengths_checks(bench_gpu):
    """Training 0.95 (nope, rope) / 0.8 (bias) / 0.5 (others); 0.8 or 0.5 at the first eval
    length; at the longest: within 3x alibi's time and peak(longest) / peak(base) <= 1.5."""
    data = []
    for enc, speed in (("alibi", 1.0), ("fire", 1 / 2.5), ("t5", 1 / 3.5)):
        data += rows(bench_gpu, enc, "eval", 256, 1 / speed)
        data += [{**rows(bench_gpu, enc, "peak", 64, math.nan)[0], "reference_seconds": math.nan}]
    data += rows(bench_gpu, "shaw", "eval", 256, 2.0, peak_mb=200.0, bias_encoding=False)
    data += [{**rows(bench_gpu, "shaw", "peak", 64, math.nan)[0], "reference_seconds": math.nan}]
    data += rows(bench_gpu, "nope", "train", 32, 1 / 0.94)
    data += rows(bench_gpu, "shaw", "train", 32, 1.9, bias_encoding=False)
    data += rows(bench_gpu, "alibi", "eval", 128, 1 / 0.81)
    table = bench_gpu.cells(pd.DataFrame(data)).set_index(["encoding", "phase", "length"])
    assert table.loc[("fire", "eval", 256)].vs_alibi_time == pytest.approx(2.5)
    assert table.loc[("fire", "eval", 256)].meets == True  # noqa: E712 - numpy's bool
    assert table.loc[("t5", "eval", 256)].meets == False  # noqa: E712 - 3.5x alibi's time
    assert table.loc[("shaw", "eval", 256)].peak_ratio == pytest.approx(2.0)
    assert table.loc[("shaw", "eval", 256)].meets == False  # noqa: E712 - memory grew 2x
    assert table.loc[("nope", "train", 32)].target == 0.95
    assert table.loc[("nope", "train", 32)].meets == False  # noqa: E712
    assert table.loc[("shaw", "train", 32)].target == 0.5
    assert table.loc[("shaw", "train", 32)].meets == True  # noqa: E712 - 0.53
    assert table.loc[("alibi", "eval", 128)].meets == True  # noqa: E712


def test_a_cell_that_would_overrun_the_budget_is_a_row_saying_so(bench_gpu):
    calls = []
    v = bench_gpu.bench.Variant("posx/a", "a", torch.nn.Identity())
    ref = bench_gpu.bench.Variant("reference", "-", torch.nn.Identity())
    budget = bench_gpu.Budget(bench_gpu.time.perf_counter() + 10, cells_left=2)
    args = type("Args", (), {"warmup": 1, "device": torch.device("cpu")})()
    result = bench_gpu.measure_cell(ref, v, calls.append, 8.0, budget, args)
    assert result["note"] == "skipped: one call would take ~8 s, over its 5 s" and not calls
    budget = bench_gpu.Budget(bench_gpu.time.perf_counter() - 1, cells_left=2)
    result = bench_gpu.measure_cell(ref, v, calls.append, 0.0, budget, args)
    assert result["note"] == "skipped: the time budget (--budget) is spent" and not calls


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--encodings", "nope,bogus"], "unknown encoding bogus; choose from "),
        (["--shapes", "gpt3"], "--shapes takes gpt2, small or gpt2,small, got gpt3"),
        (["--rounds", "0"], "--rounds must be >= 1"),
        (["--sample-seconds", "0"], "--sample-seconds must be > 0, got 0.0"),
        (["--device", "cuda:7"] if not torch.cuda.is_available() else ["--device", "tpu"], "-"),
    ],
)
def test_bad_arguments_are_one_line_errors(bench_gpu, tmp_path, monkeypatch, capsys, args, text):
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *args, "--out", str(tmp_path / "out")])
    assert bench_gpu.main() == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench_gpu: error:") and text in lines[0]
    assert not (tmp_path / "out").exists()


def test_flex_rows_build_the_encoding_with_flex_attention(bench_gpu, monkeypatch, tmp_path):
    """``NAME[flex]`` rows (in ``all``) build NAME with ``model.attention_kernel=flex``, beside
    NAME's default row; they are exactly the encodings with an opt-in FlexAttention route."""
    from posx.config.build import build_encoding
    from posx.config.compose import CONFIG_DIR, compose

    names = sorted(p.stem for p in (CONFIG_DIR / "encoding").glob("*.yaml"))
    dims = ["model=tiny", "train.length=16"]
    routes = [n for n in names if build_encoding(compose([f"encoding={n}", *dims])).has_flex_scores]
    assert list(bench_gpu.FLEX_ROWS) == routes
    assert bench_gpu.split_row("shaw[flex]") == ("shaw", "flex")
    assert bench_gpu.split_row("shaw") == ("shaw", "auto")
    shape = bench_gpu.TINY_SHAPES[0]
    flex = bench_gpu.posx_variant(shape, "shaw[flex]")
    default = bench_gpu.posx_variant(shape, "shaw")
    assert flex.model.attention_kernel == "flex" and default.model.attention_kernel == "auto"
    assert flex.encoding == "shaw[flex]" and flex.attend and not flex.bias
    argv = [str(SCRIPT), "--encodings", "shaw[flex],nope", "--out", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    all_names = bench_gpu.row_names(CONFIG_DIR)
    assert all_names == sorted([*names, *bench_gpu.VARIANT_ROWS])
    assert {f"{e}[flex]" for e in routes} <= set(bench_gpu.VARIANT_ROWS)
    args = bench_gpu.parse_args(all_names)
    assert args.encodings == ["nope", "shaw[flex]"]
    monkeypatch.setattr(sys, "argv", [str(SCRIPT)])
    assert {"shaw", "shaw[flex]", "deberta[flex]"} <= set(bench_gpu.parse_args(all_names).encodings)


def test_variant_rows_fused_rotation_and_compiled_models(bench_gpu, monkeypatch):
    """``rope[fused]`` builds RoPE with its fused rotation (rope's training target, 0.95);
    ``[compile]`` and ``[graphs]`` wrap the model in torch.compile (``reduce-overhead`` with
    Inductor), on the small shape only; an unknown variant or one the encoding lacks is an
    error."""
    shape, small = bench_gpu.TINY_SHAPES
    fused = bench_gpu.posx_variant(shape, "rope[fused]")
    assert fused.model.encoding.fused_rotation is True
    assert bench_gpu.posx_variant(shape, "rope").model.encoding.fused_rotation is False
    assert (
        bench_gpu.kind("rope[fused]", False) == "cheap" and bench_gpu.kind("rope", False) == "cheap"
    )
    assert bench_gpu.kind("shaw[flex]", False) == "other"
    for row in ("nope[compile]", "nope[graphs]"):
        v = bench_gpu.posx_variant(small, row, backend="eager")
        assert isinstance(v.model, torch._dynamo.eval_frame.OptimizedModule), row
        assert bench_gpu.runs_on(small, row) and not bench_gpu.runs_on(shape, row)
    assert bench_gpu.runs_on(shape, "rope[fused]") and bench_gpu.runs_on(shape, "shaw[flex]")
    calls = []
    real = torch.compile

    def spy(model, **kwargs):
        calls.append(kwargs)
        return real(model, backend="eager")

    monkeypatch.setattr(torch, "compile", spy)
    bench_gpu.compiled(torch.nn.Linear(2, 2), "graphs", "inductor")
    bench_gpu.compiled(torch.nn.Linear(2, 2), "compile", "inductor")
    assert bench_gpu.compiled(lin := torch.nn.Linear(2, 2), "auto", "inductor") is lin
    monkeypatch.undo()
    assert calls == [
        {"backend": "inductor", "mode": "reduce-overhead"},
        {"backend": "inductor", "mode": None},
    ]
    with pytest.raises(ValueError, match=r"unknown row variant \[fast\]"):
        bench_gpu.posx_variant(shape, "rope[fast]")
    with pytest.raises(ValueError, match="alibi has no fused rotation"):
        bench_gpu.posx_variant(shape, "alibi[fused]")


def compiled_run(tmp_path: Path, backend: str) -> pd.DataFrame:
    # A budget far above what 2 rounds take: at 60 s a loaded machine predicted the eval cell
    # over its share and skipped it (NaN); --rounds keeps the run itself short.
    proc = run(
        "--encodings", "nope[compile],nope[graphs]", "--threads", "1", "--budget", "600",
        "--sample-seconds", "0.001", "--rounds", "2", "--compile-backend", backend,
        "--out", str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    cells = pd.read_csv(tmp_path / "cells.csv")
    assert set(cells["shape"]) == {"small"}  # compiled rows: the small shape only
    cells = cells.set_index(["encoding", "phase", "length"])
    for row in ("nope[compile]", "nope[graphs]"):
        for phase, length in (("train", 32), ("eval", 128)):
            r = cells.loc[(row, phase, length)]
            assert 0.01 < r.vs_reference < 50 and r.peak_mb > 0, (row, phase, length)
    return cells


def test_compiled_rows_run_on_the_cpu_with_dynamo(tmp_path):
    """The script's compiled rows, with dynamo and its eager backend (6 s here): every cell of
    the small shape timed, none on the GPT-2 shape."""
    compiled_run(tmp_path, "eager")


@pytest.mark.slow  # Inductor compiles the tiny model's training and evaluation: ~40 s here
def test_compiled_rows_run_on_the_cpu_with_inductor(tmp_path):
    compiled_run(tmp_path, "inductor")


def test_a_run_stopped_after_a_row_keeps_that_rows_tables(bench_gpu, monkeypatch, tmp_path):
    """On a lent GPU the command is killed at its time limit: every finished row is already in
    bench_gpu.csv, cells.csv and table.md (written after each row, not at the end)."""

    class Stop(Exception):
        pass

    finished: list[str] = []

    def fake_run(self):
        if finished:
            raise Stop  # the second row: as if the device's time limit struck here
        finished.append(self.v.encoding)
        return rows(bench_gpu, self.v.encoding, "train", 32, 2.0)

    monkeypatch.setattr(bench_gpu.EncodingCells, "run", fake_run)
    argv = ["bench_gpu.py", "--encodings", "nope,alibi", "--device", "cpu", "--out", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(Stop):
        bench_gpu.main()
    data = pd.read_csv(tmp_path / "bench_gpu.csv")
    assert finished == ["nope"] and set(data.encoding) == {"nope"} and len(data) == 2
    assert "| nope |" in (tmp_path / "table.md").read_text()
    assert (tmp_path / "cells.csv").is_file()


def test_rows_run_in_the_order_given_after_the_first_three(bench_gpu, monkeypatch):
    """A device run limited in time spends itself on the rows its caller put first."""
    from posx.config.compose import CONFIG_DIR

    argv = ["bench_gpu.py", "--encodings", "fire,shaw[flex],alibi,cope,nope", "--device", "cpu"]
    monkeypatch.setattr(sys, "argv", argv)
    args = bench_gpu.parse_args(bench_gpu.row_names(CONFIG_DIR))
    assert args.encodings == ["nope", "alibi", "fire", "shaw[flex]", "cope"]
