"""MultiplicationTask: the solver parses both operands as Python ints and multiplies them."""

from __future__ import annotations

import pytest
import torch

from posx.errors import ConfigError
from posx.tasks.synthetic.multiplication import MultiplicationTask, multiply_digits


def solve(task: MultiplicationTask, row: list[int]) -> dict[int, int]:
    sep = row.index(task.sep)
    prompt = row[1:sep]
    times = prompt.index(task.times)
    a, b = prompt[:times], prompt[times + 1 :]
    assert len(b) == task.k
    order = -1 if task.reverse_digits else 1
    number = lambda ds: int("".join(map(str, ds[::order])))  # noqa: E731
    digits = [int(ch) for ch in str(number(a) * number(b)).zfill(len(a) + len(b))]
    return {sep + i: d for i, d in enumerate(digits[::order])}


@pytest.mark.parametrize(("k", "reverse_digits"), [(1, False), (2, False), (3, True)])
def test_multiplication_generator_is_right(task_checks, k, reverse_digits):
    check, vary = task_checks
    task = MultiplicationTask(multiplier_digits=k, reverse_digits=reverse_digits)
    check(task, solve, [2 * k + 4, 2 * k + 5, 32, 101], lambda n: (n - 2) // 2 - k)
    vary(task, 101)


def test_multiply_digits_matches_python_ints():
    gen = torch.Generator().manual_seed(0)
    a = torch.randint(10, (40, 15), generator=gen)
    a[0] = 9  # the longest carry chain
    m = torch.randint(10, (40, 3), generator=gen)
    m[0] = 9
    out = multiply_digits(a, m)
    val = lambda ds: int("".join(map(str, ds[::-1])))  # noqa: E731
    for r in range(40):
        assert val(out[r].tolist()) == val(a[r].tolist()) * val(m[r].tolist())


def test_multiplication_bad_arguments():
    with pytest.raises(ConfigError):
        MultiplicationTask(multiplier_digits=0)
