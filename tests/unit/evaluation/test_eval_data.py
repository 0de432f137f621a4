"""The held-out data cache: same tokens for every run, keyed by task, length, count and seed."""

from __future__ import annotations

from pathlib import Path

import torch

from posx.evaluation.data import eval_set
from posx.storage.results import results_root
from posx.tasks.base import Batch
from posx.tasks.synthetic.copy import CopyTask
from posx.tasks.text import TextTask


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


class SharedStorageTask(CopyTask):
    """Returns inputs and targets as overlapping views of one tensor, as the text task does:
    with one sequence both views are contiguous, so ``.contiguous()`` keeps them shared."""

    def eval_set(self, length, num_sequences, seed):
        window = torch.arange(num_sequences * (length + 1)).view(num_sequences, length + 1)
        mask = torch.ones(num_sequences, length, dtype=torch.bool)
        return Batch(window[:, :-1], window[:, 1:], mask)


def test_one_sequence_whose_tensors_share_memory_is_cached(tmp_path):
    # `posx eval RUN --lengths 1024 eval.tokens=1024` on text: one sequence, whose inputs and
    # targets are views of one window; safetensors refused to save them ("share memory").
    a = eval_set(SharedStorageTask(), 8, 1, 0, tmp_path, CFG)
    b = eval_set(SharedStorageTask(), 8, 1, 0, tmp_path, CFG)
    assert torch.equal(a.inputs, torch.arange(8).unsqueeze(0))
    assert torch.equal(a.targets, torch.arange(1, 9).unsqueeze(0))
    for x, y in ((a.inputs, b.inputs), (a.targets, b.targets), (a.mask, b.mask)):
        assert torch.equal(x, y)
    assert len(list(tmp_path.glob("*.safetensors"))) == 1


def test_one_text_sequence_is_cached(tmp_path):
    corpus = tmp_path / "corpus.bin"
    corpus.write_bytes(bytes(range(256)) * 8)
    task = TextTask(str(corpus), val_fraction=0.5)
    made = eval_set(task, 16, 1, 0, tmp_path / "cache", {"corpus": str(corpus)})
    again = eval_set(task, 16, 1, 0, tmp_path / "cache", {"corpus": str(corpus)})
    assert made.inputs.shape == (1, 16) and torch.equal(made.targets, again.targets)
    assert torch.equal(made.targets[0, :-1], made.inputs[0, 1:])


def test_sets_cached_before_text_was_sized_in_tokens_are_rebuilt(tmp_path, monkeypatch):
    """Cache version 1 held BPE windows cut from ``n·L`` held-out bytes (padded, shorter than
    their length); what the cache holds changed, so its key did, and such a file is not read."""
    corpus = tmp_path / "corpus.bin"
    corpus.write_bytes(bytes(range(256)) * 8)
    cfg, task = {"corpus": str(corpus)}, TextTask(str(corpus), val_fraction=0.5)
    padded = torch.zeros(1, 16, dtype=torch.bool)
    padded[0, :5] = True  # what an old BPE row of 16 held: 5 tokens, then padding
    ids = torch.zeros(1, 16, dtype=torch.long)
    stale = Batch(ids, ids.clone(), padded)
    monkeypatch.setattr("posx.evaluation.data.CACHE_VERSION", 1)
    monkeypatch.setattr(task, "eval_set", lambda *args: stale)
    eval_set(task, 16, 1, 0, tmp_path / "cache", cfg)  # written as the old posx did
    monkeypatch.undo()
    fresh = eval_set(TextTask(str(corpus), val_fraction=0.5), 16, 1, 0, tmp_path / "cache", cfg)
    assert fresh.mask.all() and torch.equal(fresh.targets[0, :-1], fresh.inputs[0, 1:])
