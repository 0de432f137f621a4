"""Peak memory per length: a block's peak is its own, not the one of the block before it."""

from __future__ import annotations

import sys

import pytest
import torch

from posx.evaluation.memory import PeakMemory

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@linux
def test_peak_sees_a_short_lived_allocation_and_the_next_block_does_not():
    cpu = torch.device("cpu")
    with PeakMemory(cpu) as big:
        x = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
        del x
    assert big.delta_mb > 48, big.delta_mb
    assert big.peak_mb >= big.base_mb
    with PeakMemory(cpu) as small:
        y = torch.ones(1024)
        del y
    assert small.delta_mb < 16, small.delta_mb  # the 64 MiB block's peak is not inherited


def test_sampling_fallback_when_the_kernel_counter_cannot_be_reset(monkeypatch):
    monkeypatch.setattr("posx.evaluation.memory.reset_peak_rss", lambda: False)
    with PeakMemory(torch.device("cpu"), interval=0.001) as mem:
        x = torch.ones(32 * 2**20 // 4)
        del x
    assert mem.peak_mb >= mem.base_mb > 0
