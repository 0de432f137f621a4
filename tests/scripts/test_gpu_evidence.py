"""scripts/gpu_evidence.sh, the one command a lent GPU machine runs (issue 58), run on the CPU:
each step under its limit, every table where the device tool returns it (at most 8 files, two
folders deep), a step stopped at its limit logged and the next one still run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_evidence.sh"


@pytest.mark.slow  # ~1-2 min: two tiny benchmarks and a pytest start on the CPU
def test_the_evidence_script_writes_every_table_within_the_device_tools_limits(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(out), "TESTS_S": "1",
           "BENCH_S": "100", "EXTEND_S": "90", "ENCODINGS": "nope,alibi"}  # fmt: skip
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=400)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == [
        "bench_extend/bench_extend.csv", "bench_extend/bench_extend.md", "bench_gpu/bench_gpu.csv",
        "bench_gpu/cells.csv", "bench_gpu/table.md", "log.txt", "tests.txt",
    ]  # fmt: skip
    log = (out / "log.txt").read_text()
    assert "torch " in log and "transformers " in log
    # one second cannot start pytest: the step is stopped, logged, and the benchmarks still run
    assert "== tests: exit 124" in log
    assert "== bench_gpu: exit 0" in log and "== bench_extend: exit 0" in log
    assert "| nope |" in (out / "bench_gpu" / "table.md").read_text()
    assert "| nope |" in proc.stdout
