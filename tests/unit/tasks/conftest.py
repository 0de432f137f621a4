"""Checks shared by the synthetic-task tests: a hand-written solver against the generator.

A solver is a function ``solve(task, row) -> {position: token}`` that reads one input row
(a list of ids) the way a person would and returns, for every input position whose next token
is part of the answer, that token. The checks then demand that the task's mask is exactly the
solver's positions and that the targets there are exactly the solver's tokens (100% exact
match), that seeds reproduce instances, and that too-short lengths are a ConfigError.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from posx.errors import ConfigError
from posx.tasks.base import Batch
from posx.tasks.synthetic.common import SyntheticTask

Solver = Callable[[SyntheticTask, list[int]], dict[int, int]]


def split(task: SyntheticTask, row: list[int]) -> tuple[list[int], list[int], int]:
    """``(prompt, after_sep, sep_position)`` of an input row ``BOS prompt SEP ...``."""
    assert row[0] == task.bos
    sep = row.index(task.sep)
    return row[1:sep], row[sep + 1 :], sep


def check_batch(task: SyntheticTask, batch: Batch, length: int, solve: Solver) -> None:
    b = len(batch)
    assert batch.inputs.shape == batch.targets.shape == batch.mask.shape == (b, length)
    assert batch.mask.dtype == torch.bool and batch.inputs.dtype == torch.long
    assert torch.equal(batch.targets[:, :-1], batch.inputs[:, 1:])
    assert batch.inputs.min() >= 0 and batch.inputs.max() < task.vocab_size
    assert batch.targets.min() >= 0 and batch.targets.max() < task.vocab_size
    assert batch.mask.any(1).all(), "every sequence has an answer"
    # Specials never appear inside the scored answer.
    assert (batch.targets[batch.mask] < task.num_tokens).all()
    for r in range(b):
        answer = solve(task, batch.inputs[r].tolist())
        expected = torch.zeros(length, dtype=torch.bool)
        expected[list(answer)] = True
        assert torch.equal(batch.mask[r], expected), f"row {r}: mask is not the answer"
        want = torch.tensor([answer[t] for t in sorted(answer)])
        assert torch.equal(batch.targets[r][expected], want), f"row {r}: wrong answer"


def check_task(
    task: SyntheticTask, solve: Solver, lengths: list[int], mapping: Callable[[int], int]
) -> None:
    """Runs every generic check of a synthetic task at ``lengths``.

    Args:
        task: The task under test.
        solve: Its hand-written solver.
        lengths: Sequence lengths to generate at (each must fit ``task.min_size``).
        mapping: The documented ``length -> instance size`` formula.
    """
    gen = torch.Generator().manual_seed(0)
    for length in lengths:
        assert task.size_for(length) == mapping(length), f"length mapping at {length}"
        assert task.footprint(task.size_for(length)) <= length + 1
        assert task.footprint(task.size_for(length) + 1) > length + 1, "not the largest size"
        for _ in range(2):
            check_batch(task, task.train_batch(12, length, gen), length, solve)
        check_batch(task, task.eval_set(length, 8, seed=1), length, solve)
    length = lengths[-1]
    # Seeds reproduce instances; eval sets depend on (seed, length) only.
    a, b, c = (task.eval_set(length, 16, seed=s) for s in (3, 3, 4))
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.mask, b.mask)
    assert not torch.equal(a.inputs, c.inputs)
    x = task.train_batch(6, length, torch.Generator().manual_seed(7))
    y = task.train_batch(6, length, torch.Generator().manual_seed(7))
    assert torch.equal(x.inputs, y.inputs) and torch.equal(x.mask, y.mask)
    # Too short for the smallest instance: a config error, in training and evaluation.
    short = task.footprint(task.min_size) - 2
    with pytest.raises(ConfigError):
        task.train_batch(2, short, gen)
    with pytest.raises(ConfigError):
        task.eval_set(short, 2, seed=0)
    assert task.describe()["length_mapping"]


def train_sizes_vary(task: SyntheticTask, length: int) -> None:
    """Training draws more than one instance size (the number of scored tokens varies)."""
    batch = task.train_batch(64, length, torch.Generator().manual_seed(0))
    content = (batch.inputs != task.pad).sum(1)
    assert len(content.unique()) > 1


@pytest.fixture
def task_checks() -> tuple[Callable[..., None], Callable[..., None]]:
    """``(check_task, train_sizes_vary)``."""
    return check_task, train_sizes_vary
