"""Peak memory per length: a block's peak is its own, not the one of the block before it."""

from __future__ import annotations

import gc
import sys
import weakref

import pytest
import torch

from posx.evaluation import memory
from posx.evaluation.memory import PeakMemory, heap_frozen

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


@pytest.fixture
def unfrozen_heap():
    """The heap as a process outside the test suite has it: nothing frozen (tests/conftest.py
    freezes it per module; frozen again after the test)."""
    gc.unfreeze()
    yield
    gc.collect()
    gc.freeze()


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_a_sweep_freezes_what_came_before_it_and_still_collects_its_own_garbage(unfrozen_heap):
    old = Cycle()
    gone_old = weakref.ref(old)
    with heap_frozen():
        assert gc.get_freeze_count() > 1000  # the modules, the test's objects, `old`
        made = Cycle()
        gone_made = weakref.ref(made)
        del made, old
        gc.collect()
        assert gone_made() is None  # a cycle the sweep made and dropped: collected
        assert gone_old() is not None  # frozen: out of the collector's sight
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert gone_old() is None  # unfrozen again: a later collection frees it


def test_a_heap_the_caller_froze_is_left_frozen(unfrozen_heap):
    gc.freeze()
    young = Cycle()  # made after the caller's freeze
    gone = weakref.ref(young)
    with heap_frozen():
        del young
        gc.collect()
        assert gone() is None  # the sweep froze nothing more: still collected
    # the caller's freeze kept (a count, not equality: frozen objects still die by refcount)
    assert gc.get_freeze_count() > 1000


def test_an_evaluation_walks_the_old_heap_once_not_once_per_length(unfrozen_heap, monkeypatch):
    """Every length collects garbage before it starts; with the heap unfrozen each collection
    walks every object (0.1-0.4 s with torch imported): the sweep collects the old heap once."""
    from posx.config.build import build_model, build_task
    from posx.config.compose import compose
    from posx.evaluation.sweep import evaluate_model

    cfg = compose(["task=copy", "model.d_model=32", "model.n_heads=4", "model.n_layers=1",
                   "train.length=16", "eval.tokens=64", "encoding=alibi"])  # fmt: skip
    task = build_task(cfg)
    model = build_model(cfg, task.vocab_size)
    full = []
    real = gc.collect

    def counting(*args):
        full.append(gc.get_freeze_count() == 0)
        return real(*args)

    monkeypatch.setattr(memory.gc, "collect", counting)
    rows, _ = evaluate_model(model, task, [16, 24, 32], cfg, torch.device("cpu"), cache_dir=None)
    assert [r["status"] for r in rows] == ["ok"] * 3
    assert len(full) == 4 and full.count(True) == 1, full  # one before the sweep, one per length
