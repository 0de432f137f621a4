"""SortTask: single-digit (bucket sort) and comma-separated multi-digit numbers."""

from __future__ import annotations

import pytest

from posx.errors import ConfigError
from posx.tasks.synthetic.sort import SortTask


def solve(task: SortTask, row: list[int]) -> dict[int, int]:
    """Parses the numbers between BOS and SEP, sorts them as integers, writes them back."""
    sep = row.index(task.sep)
    prompt = row[1:sep]
    if task.digits == 1:
        numbers = [[d] for d in prompt]
    else:
        numbers, current = [], []
        for tok in [*prompt, task.comma]:
            if tok == task.comma:
                numbers.append(current)
                current = []
            else:
                current.append(tok)
    value = lambda ds: sum(d * task.num_symbols**i for i, d in enumerate(reversed(ds)))  # noqa: E731
    ordered = sorted(numbers, key=value)
    out: list[int] = []
    for i, ds in enumerate(ordered):
        assert len(ds) == task.digits
        out += ([task.comma] if i and task.comma is not None else []) + ds
    return {sep + i: tok for i, tok in enumerate(out)}


def test_single_digit_sort(task_checks):
    check, vary = task_checks
    task = SortTask()
    check(task, solve, [3, 16, 33, 64], lambda n: (n - 1) // 2)
    vary(task, 64)


@pytest.mark.parametrize("digits", [2, 3])
def test_multi_digit_sort(task_checks, digits):
    check, vary = task_checks
    task = SortTask(num_symbols=10, digits=digits, min_size=2)
    check(task, solve, [4 * digits + 3, 40, 64, 101], lambda n: (n + 1) // (2 * (digits + 1)))
    vary(task, 101)


def test_bucket_sort_alphabet(task_checks):
    check, _ = task_checks
    task = SortTask(num_symbols=5)
    assert task.vocab_size == 8
    check(task, solve, [9, 64], lambda n: (n - 1) // 2)


def test_sorted_output_is_ascending():
    task = SortTask(num_symbols=10, digits=2)
    batch = task.eval_set(64, 4, seed=0)
    for r in range(4):
        ans = batch.targets[r][batch.mask[r]].tolist()
        nums = [ans[i] * 10 + ans[i + 1] for i in range(0, len(ans), 3)]
        assert nums == sorted(nums)


@pytest.mark.parametrize("kwargs", [{"num_symbols": 1}, {"digits": 0}, {"min_size": 0}])
def test_sort_bad_arguments(kwargs):
    with pytest.raises(ConfigError):
        SortTask(**kwargs)
