"""ReverseTask: ``BOS x SEP reversed(x)``; the solver reverses the prompt by hand."""

from __future__ import annotations

import pytest

from posx.errors import ConfigError
from posx.tasks.synthetic.reverse import ReverseTask


def solve(task: ReverseTask, row: list[int]) -> dict[int, int]:
    sep = row.index(task.sep)
    prompt = row[1:sep]
    answer = prompt[::-1]
    return {sep + i: tok for i, tok in enumerate(answer)}


@pytest.mark.parametrize("min_size", [1, 3])
def test_reverse_generator_is_right(task_checks, min_size):
    check, vary = task_checks
    task = ReverseTask(num_symbols=7, min_size=min_size)
    check(task, solve, [2 * min_size + 1, 16, 33, 64], lambda n: (n - 1) // 2)
    vary(task, 64)


def test_reverse_is_not_copy():
    task = ReverseTask(num_symbols=16)
    batch = task.eval_set(41, 4, seed=0)
    n = task.size_for(41)
    assert (batch.inputs[:, n + 2 : 2 * n + 1] != batch.inputs[:, 1:n]).any()


def test_reverse_bad_alphabet():
    with pytest.raises(ConfigError):
        ReverseTask(num_symbols=1)
