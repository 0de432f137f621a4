"""ModularSumTask (and parity = modulus 2): the solver sums the list with Python ints."""

from __future__ import annotations

import pytest
import torch

from posx.errors import ConfigError
from posx.tasks.synthetic.modular import ModularSumTask


def solve(task: ModularSumTask, row: list[int]) -> dict[int, int]:
    sep = row.index(task.sep)
    return {sep: sum(row[1:sep]) % task.modulus}


@pytest.mark.parametrize("modulus", [2, 5, 7])
def test_modular_sum_generator_is_right(task_checks, modulus):
    check, vary = task_checks
    task = ModularSumTask(modulus=modulus)
    check(task, solve, [3, 4, 16, 65], lambda n: n - 2)
    vary(task, 65)


def test_parity_answers_are_balanced():
    task = ModularSumTask(modulus=2)
    batch = task.eval_set(64, 400, seed=0)
    assert set(batch.targets[batch.mask].tolist()) == {0, 1}
    assert 120 < batch.targets[batch.mask].sum() < 280
    assert (batch.mask.sum(1) == 1).all()
    assert torch.equal(batch.mask[:, -1], torch.ones(400, dtype=torch.bool))  # answer is last


def solve_scratchpad(task: ModularSumTask, row: list[int]) -> dict[int, int]:
    sep = row.index(task.sep)
    prompt, total, answer = row[1:sep], 0, {}
    for i, x in enumerate(prompt):  # the i-th running sum is predicted at sep + i
        total = (total + x) % task.modulus
        answer[sep + i] = total
    return answer


@pytest.mark.parametrize("modulus", [2, 5])
def test_scratchpad_answers_every_running_sum(task_checks, modulus):
    check, vary = task_checks
    task = ModularSumTask(modulus=modulus, scratchpad=True)
    check(task, solve_scratchpad, [3, 4, 16, 65], lambda n: (n - 1) // 2)
    vary(task, 65)
    batch = task.eval_set(32, 50, seed=0)
    last = batch.mask.long().cumsum(1).argmax(1)  # the final running sum is the total
    totals = [sum(r[1 : r.index(task.sep)]) % modulus for r in batch.inputs.tolist()]
    assert batch.targets.gather(1, last.unsqueeze(1)).squeeze(1).tolist() == totals


def test_modular_bad_modulus():
    with pytest.raises(ConfigError):
        ModularSumTask(modulus=1)
