"""scripts/bench_bias_kernel.py: the split design it measures against is exact; a short run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

from posx.encodings.alibi import ALiBi
from posx.kernels.bias import blocked_bias_attention
from tests.scripts.script_loader import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_bias_kernel.py"


def load():
    return load_script("bench_bias_kernel")


def test_split_blocks_merged_by_log_sum_exp_equal_posx_kernel():
    script = load()
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 37, 8, generator=gen) for _ in range(3))
    pos, alibi = torch.arange(37), ALiBi(n_heads=4)
    with torch.inference_mode():
        want = blocked_bias_attention(q, k, v, pos, pos, alibi.bias, 37)
        for step in (1, 5, 16, 37):
            got = script.split_bias_attention(q, k, v, script.split_blocks(pos, alibi.bias, step))
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120
    )


def test_a_short_run_prints_the_three_kernels():
    proc = run("--length", "64", "--batch", "1", "--heads", "2", "--block", "16", "--rounds", "2")
    assert proc.returncode == 0, proc.stderr
    for name in ("is_causal (no bias)", "posx blocked", "split + lse merge"):
        assert name in proc.stdout


def test_bad_sizes_are_refused_in_one_line():
    proc = run("--block", "0")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: every size and --rounds must be at least 1"
