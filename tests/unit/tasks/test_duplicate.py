"""DuplicateTask: ``BOS w SEP w w``; the solver writes the prompt twice by hand."""

from __future__ import annotations

from posx.tasks.synthetic.duplicate import DuplicateTask


def solve(task: DuplicateTask, row: list[int]) -> dict[int, int]:
    sep = row.index(task.sep)
    prompt = row[1:sep]
    return {sep + i: tok for i, tok in enumerate(prompt + prompt)}


def test_duplicate_generator_is_right(task_checks):
    check, vary = task_checks
    task = DuplicateTask(num_symbols=5, min_size=2)
    check(task, solve, [7, 16, 31, 64], lambda n: (n - 1) // 3)
    vary(task, 64)
