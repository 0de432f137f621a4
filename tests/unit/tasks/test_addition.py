"""AdditionTask: the solver parses both operands as Python ints and adds them."""

from __future__ import annotations

import pytest
import torch

from posx.tasks.synthetic.addition import AdditionTask, add_digits


def solve(task: AdditionTask, row: list[int]) -> dict[int, int]:
    sep = row.index(task.sep)
    prompt = row[1:sep]
    plus = prompt.index(task.plus)
    a, b = prompt[:plus], prompt[plus + 1 :]
    assert len(a) == len(b)
    order = -1 if task.reverse_digits else 1
    number = lambda ds: int("".join(map(str, ds[::order])))  # noqa: E731
    digits = [int(ch) for ch in str(number(a) + number(b)).zfill(len(a) + 1)]
    return {sep + i: d for i, d in enumerate(digits[::order])}


@pytest.mark.parametrize("reverse_digits", [False, True])
def test_addition_generator_is_right(task_checks, reverse_digits):
    check, vary = task_checks
    task = AdditionTask(reverse_digits=reverse_digits)
    check(task, solve, [6, 7, 8, 33, 100], lambda n: (n - 3) // 3)
    vary(task, 100)


def test_add_digits_long_carry_chains():
    # 999..9 + 000..1 carries through every digit; little-endian rows.
    a = torch.tensor([[9] * 6, [5, 4, 9, 9, 0, 0]])
    b = torch.tensor([[1, 0, 0, 0, 0, 0], [5, 5, 0, 0, 9, 9]])
    out = add_digits(a, b)
    assert out[0].tolist() == [0, 0, 0, 0, 0, 0, 1]
    # 009945 + 990055 = 1000000
    assert out[1].tolist() == [0, 0, 0, 0, 0, 0, 1]


def test_add_digits_matches_python_ints():
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randint(10, (50, 12), generator=gen), torch.randint(10, (50, 12), generator=gen)
    out = add_digits(a, b)
    val = lambda ds: int("".join(map(str, ds[::-1])))  # noqa: E731
    for r in range(50):
        assert val(out[r].tolist()) == val(a[r].tolist()) + val(b[r].tolist())


def test_carries_are_common():
    task = AdditionTask()
    batch = task.eval_set(100, 32, seed=0)
    leading = batch.targets[batch.mask].view(32, -1)[:, 0]
    assert 0 < leading.sum() < 32  # some sums overflow into the extra digit, some do not
