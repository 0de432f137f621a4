"""AssociativeRecallTask: the solver builds a dict of the pairs and answers each query."""

from __future__ import annotations

import pytest

from posx.errors import ConfigError
from posx.tasks.synthetic.recall import AssociativeRecallTask


def solve(task: AssociativeRecallTask, row: list[int]) -> dict[int, int]:
    sep = row.index(task.sep)
    t = task.key_tokens
    prompt = row[1:sep]
    assert len(prompt) % (t + 1) == 0
    table: dict[tuple[int, ...], int] = {}
    for i in range(0, len(prompt), t + 1):
        key = tuple(prompt[i : i + t])
        assert key not in table, "keys are distinct"
        assert all(k < task.num_keys for k in key) and prompt[i + t] >= task.num_keys
        table[key] = prompt[i + t]
    out = {}
    for i in range(task.num_queries):
        start = sep + 1 + i * (t + 1)
        key = tuple(row[start : start + t])
        out[start + t - 1] = table[key]
    return out


@pytest.mark.parametrize(("keys", "t", "q"), [(32, 2, 4), (40, 1, 1), (4, 3, 2)])
def test_recall_generator_is_right(task_checks, keys, t, q):
    check, vary = task_checks
    task = AssociativeRecallTask(
        num_keys=keys, key_tokens=t, num_values=5, num_queries=q, min_size=q
    )
    lengths = [task.footprint(q) - 1, 33, 64]
    check(task, solve, lengths, lambda n: (n - 1) // (t + 1) - q)
    vary(task, 64)


def test_queries_are_distinct():
    task = AssociativeRecallTask(num_queries=8, min_size=8)
    batch = task.eval_set(64, 16, seed=0)
    sep = task.size_for(64) * 3 + 1
    for row in batch.inputs.tolist():
        keys = {tuple(row[sep + 1 + 3 * i : sep + 3 + 3 * i]) for i in range(8)}
        assert len(keys) == 8


def test_recall_needs_enough_keys():
    task = AssociativeRecallTask(num_keys=4, key_tokens=1, num_queries=1, min_size=1)
    task.eval_set(2 * 4 + 3, 2, seed=0)  # 4 pairs + 1 query: fits
    with pytest.raises(ConfigError, match="distinct keys"):
        task.eval_set(64, 2, seed=0)


@pytest.mark.parametrize(
    "kwargs", [{"num_keys": 1}, {"key_tokens": 0}, {"num_queries": 0}, {"num_queries": 5}]
)
def test_recall_bad_arguments(kwargs):
    with pytest.raises(ConfigError):
        AssociativeRecallTask(**kwargs)
