"""The held-out data cache: same tokens for every run, keyed by task, length, count and seed."""

from __future__ import annotations

from pathlib import Path

import torch

from posx.evaluation.data import eval_set, results_root
from posx.tasks.synthetic.copy import CopyTask


class CountingCopy(CopyTask):
    """A copy task that counts how often it builds an eval set."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.built = 0

    def eval_set(self, length, num_sequences, seed):
        self.built += 1
        return super().eval_set(length, num_sequences, seed)


CFG = {"_target_": "posx.tasks.synthetic.copy.CopyTask", "num_symbols": 16}


def test_second_run_reads_the_cached_set(tmp_path):
    first, second = CountingCopy(), CountingCopy()
    a = eval_set(first, 21, 5, 7, tmp_path, CFG)
    b = eval_set(second, 21, 5, 7, tmp_path, CFG)
    assert (first.built, second.built) == (1, 0)
    for x, y in ((a.inputs, b.inputs), (a.targets, b.targets), (a.mask, b.mask)):
        assert torch.equal(x, y) and x.dtype == y.dtype
    files = list(tmp_path.glob("*.safetensors"))
    assert len(files) == 1 and not list(tmp_path.glob("*.tmp"))


def test_key_separates_length_count_seed_and_task(tmp_path):
    task = CountingCopy()
    eval_set(task, 21, 5, 7, tmp_path, CFG)
    eval_set(task, 23, 5, 7, tmp_path, CFG)
    eval_set(task, 21, 6, 7, tmp_path, CFG)
    eval_set(task, 21, 5, 8, tmp_path, CFG)
    eval_set(task, 21, 5, 7, tmp_path, {**CFG, "num_symbols": 8})
    assert task.built == 5 and len(list(tmp_path.glob("*.safetensors"))) == 5


def test_corrupt_cache_file_is_rebuilt(tmp_path):
    task = CountingCopy()
    good = eval_set(task, 21, 5, 7, tmp_path, CFG)
    (path,) = tmp_path.glob("*.safetensors")
    path.write_bytes(b"not a safetensors file")
    again = eval_set(task, 21, 5, 7, tmp_path, CFG)
    assert task.built == 2 and torch.equal(good.inputs, again.inputs)
    assert eval_set(CountingCopy(), 21, 5, 7, tmp_path, CFG).inputs.shape == (5, 21)


def test_no_cache_dir_means_no_files(tmp_path):
    task = CountingCopy()
    eval_set(task, 21, 5, 7, None, CFG)
    eval_set(task, 21, 5, 7, None, CFG)
    assert task.built == 2 and not list(tmp_path.iterdir())


def test_results_root_of_runs_and_sweeps(tmp_path):
    assert results_root(tmp_path / "runs" / "r1") == tmp_path.resolve()
    assert results_root(tmp_path / "sweeps" / "s1" / "r1") == tmp_path.resolve()
    assert results_root(Path(tmp_path / "elsewhere" / "r1")) == (tmp_path / "elsewhere").resolve()
