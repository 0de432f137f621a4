"""The Makefile parses and lists every target the README and docs name (a merge once left
conflict markers in it, and every `make` command stopped at line 15)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_help_lists_every_target():
    proc = subprocess.run(["make", "-s", "help"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    listed = {line.split()[0] for line in proc.stdout.splitlines() if line.startswith("  ")}
    for target in ("install", "demo", "test", "test-slow", "lint", "bench-gpu",
                   "bench-extend-gpu", "gpu-deps", "gpu-evidence"):  # fmt: skip
        assert target in listed, proc.stdout
