"""scripts/probe_gpu.py on the CPU (tiny shapes, FlexAttention's eager forward): every route
and rotation is a row of probe.csv and of the printed table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "probe_gpu.py"


@pytest.mark.slow  # ~10-20 s: five eager FlexAttention routes on the CPU
def test_the_probe_times_every_route_on_the_cpu(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--reps", "1"],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = pd.read_csv(tmp_path / "probe.csv")
    assert set(rows.what) == {"sdpa_flash", "flex_no_mod", "flex_alibi_indices",
                              "flex_alibi_positions", "flex_table_posx", "rope_posx",
                              "rope_rotate_half"}  # fmt: skip
    assert rows.ms.notna().all() and (rows.ms > 0).all()
    assert "| flex_table_posx | eval | 256 |" in proc.stdout
