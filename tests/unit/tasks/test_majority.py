"""MajorityTask: the solver counts symbols with a dict; ties go to the smallest id."""

from __future__ import annotations

from collections import Counter

import pytest

from posx.errors import ConfigError
from posx.tasks.synthetic.majority import MajorityTask


def solve(task: MajorityTask, row: list[int]) -> dict[int, int]:
    sep = row.index(task.sep)
    counts = Counter(row[1:sep])
    best = max(counts.values())
    return {sep: min(s for s, c in counts.items() if c == best)}


@pytest.mark.parametrize("num_symbols", [2, 4, 9])
def test_majority_generator_is_right(task_checks, num_symbols):
    check, vary = task_checks
    task = MajorityTask(num_symbols=num_symbols)
    check(task, solve, [3, 4, 5, 16, 63], lambda n: n - 2)
    vary(task, 63)


def test_majority_bad_alphabet():
    with pytest.raises(ConfigError):
        MajorityTask(num_symbols=1)
