"""CopyTask: layout ``BOS x_1..x_n SEP x_1..x_n``, only the second copy scored."""

from __future__ import annotations

import pytest
import torch

from posx.errors import ConfigError
from posx.tasks.base import Batch
from posx.tasks.synthetic.copy import CopyTask


def solve(task: CopyTask, inputs: torch.Tensor) -> torch.Tensor:
    """A hand-written solver: after SEP, predict the string read between BOS and SEP."""
    pred = torch.full_like(inputs, task.pad)
    for r, row in enumerate(inputs.tolist()):
        assert row[0] == task.bos
        sep = row.index(task.sep)
        string = row[1:sep]
        for t in range(sep, len(row)):
            if t - sep < len(string):
                pred[r, t] = string[t - sep]
    return pred


def expected_mask(task: CopyTask, inputs: torch.Tensor) -> torch.Tensor:
    """Targets at positions sep .. sep + n - 1 are the n symbols of the second copy."""
    mask = torch.zeros_like(inputs, dtype=torch.bool)
    for r, row in enumerate(inputs.tolist()):
        sep = row.index(task.sep)
        n = sep - 1
        mask[r, sep : sep + n] = True
    return mask


def check_batch(task: CopyTask, batch: Batch, length: int) -> None:
    b = len(batch)
    assert batch.inputs.shape == batch.targets.shape == batch.mask.shape == (b, length)
    assert batch.mask.dtype == torch.bool
    torch.testing.assert_close(batch.targets[:, :-1], batch.inputs[:, 1:])
    assert batch.inputs.min() >= 0 and batch.inputs.max() < task.vocab_size
    assert batch.targets.min() >= 0 and batch.targets.max() < task.vocab_size
    assert torch.equal(batch.mask, expected_mask(task, batch.inputs))
    # Scored targets are symbols only, never PAD/BOS/SEP.
    assert (batch.targets[batch.mask] < task.num_symbols).all()
    pred = solve(task, batch.inputs)
    assert torch.equal(pred[batch.mask], batch.targets[batch.mask])  # 100% accuracy


@pytest.mark.parametrize("length", [3, 4, 16, 33])
def test_solver_gets_everything_right_on_train_batches(length):
    task = CopyTask(num_symbols=5)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        check_batch(task, task.train_batch(16, length, gen), length)


@pytest.mark.parametrize("length", [3, 16, 33, 64])
def test_solver_gets_everything_right_on_eval_set(length):
    task = CopyTask(num_symbols=16)
    batch = task.eval_set(length, 8, seed=1)
    check_batch(task, batch, length)


@pytest.mark.parametrize("length", [3, 4, 16, 17, 64])
def test_eval_set_uses_the_largest_string_that_fits(length):
    task = CopyTask()
    batch = task.eval_set(length, 4, seed=0)
    n = (length - 1) // 2
    assert task.size_for(length) == n
    assert (batch.mask.sum(dim=1) == n).all()
    assert (batch.inputs[:, n + 1] == task.sep).all()
    assert (batch.inputs[:, 1 : n + 1] < task.num_symbols).all()


def test_train_sizes_vary_within_bounds():
    task = CopyTask(num_symbols=4, min_size=2)
    batch = task.train_batch(200, 21, torch.Generator().manual_seed(0))
    sizes = batch.mask.sum(dim=1)
    assert sizes.min() >= 2 and sizes.max() <= 10
    assert len(sizes.unique()) > 1


def test_eval_set_is_seeded():
    task = CopyTask()
    a, b = task.eval_set(32, 6, seed=3), task.eval_set(32, 6, seed=3)
    c = task.eval_set(32, 6, seed=4)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert torch.equal(a.mask, b.mask)
    assert not torch.equal(a.inputs, c.inputs)


def test_train_batch_follows_generator():
    task = CopyTask()
    a = task.train_batch(4, 16, torch.Generator().manual_seed(7))
    b = task.train_batch(4, 16, torch.Generator().manual_seed(7))
    assert torch.equal(a.inputs, b.inputs)


def test_vocab_layout():
    task = CopyTask(num_symbols=16)
    assert task.vocab_size == 19
    assert {task.pad, task.bos, task.sep} == {16, 17, 18}
    assert task.exact_match


@pytest.mark.parametrize(("min_size", "length"), [(1, 2), (1, 1), (3, 6)])
def test_too_short_length_is_a_config_error(min_size, length):
    task = CopyTask(min_size=min_size)
    with pytest.raises(ConfigError):
        task.train_batch(2, length, torch.Generator().manual_seed(0))
    with pytest.raises(ConfigError):
        task.eval_set(length, 2, seed=0)


@pytest.mark.parametrize("kwargs", [{"num_symbols": 1}, {"min_size": 0}])
def test_bad_arguments_are_config_errors(kwargs):
    with pytest.raises(ConfigError):
        CopyTask(**kwargs)


def test_copy_passes_the_shared_task_checks(task_checks):
    check, vary = task_checks

    def solve_row(task: CopyTask, row: list[int]) -> dict[int, int]:
        sep = row.index(task.sep)
        return {sep + i: tok for i, tok in enumerate(row[1:sep])}

    task = CopyTask(num_symbols=6, min_size=2)
    check(task, solve_row, [5, 16, 33], lambda n: (n - 1) // 2)
    vary(task, 33)
