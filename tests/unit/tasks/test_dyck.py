"""DyckTask: the solver tracks bracket depth with a counter."""

from __future__ import annotations

import pytest

from posx.errors import ConfigError
from posx.tasks.synthetic.dyck import NO, YES, DyckTask


def solve(task: DyckTask, row: list[int]) -> dict[int, int]:
    sep = row.index(task.sep)
    depth, ok = 0, True
    for tok in row[1:sep]:
        depth += 1 if tok == 0 else -1
        ok &= depth >= 0
    assert depth == 0  # equal counts by construction
    return {sep: YES if ok else NO}


def test_dyck_generator_is_right(task_checks):
    check, vary = task_checks
    task = DyckTask()
    check(task, solve, [4, 5, 16, 64, 129], lambda n: (n - 2) // 2)
    vary(task, 64)


@pytest.mark.parametrize("length", [16, 256])
def test_dyck_labels_are_roughly_balanced(length):
    batch = DyckTask().eval_set(length, 400, seed=0)
    yes = (batch.targets[batch.mask] == YES).float().mean().item()
    assert 0.4 < yes < 0.65


def test_dyck_min_size():
    with pytest.raises(ConfigError):
        DyckTask(min_size=0)
