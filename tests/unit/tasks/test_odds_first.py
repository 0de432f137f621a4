"""OddsFirstTask: odd (1-based) positions first, then even ones; solved by slicing."""

from __future__ import annotations

from posx.tasks.synthetic.odds_first import OddsFirstTask


def solve(task: OddsFirstTask, row: list[int]) -> dict[int, int]:
    sep = row.index(task.sep)
    prompt = row[1:sep]
    answer = prompt[0::2] + prompt[1::2]
    return {sep + i: tok for i, tok in enumerate(answer)}


def test_odds_first_generator_is_right(task_checks):
    check, vary = task_checks
    task = OddsFirstTask(num_symbols=6)
    check(task, solve, [3, 4, 16, 17, 50], lambda n: (n - 1) // 2)
    vary(task, 50)


def test_odds_first_example():
    task = OddsFirstTask(num_symbols=16)
    batch = task.eval_set(11, 1, seed=0)  # n = 5
    row = batch.inputs[0].tolist()
    x = row[1:6]
    assert batch.targets[0][batch.mask[0]].tolist() == [x[0], x[2], x[4], x[1], x[3]]
