"""NeedleTask (niah_multikey / multivalue / multiquery): a solver that reads the needles back."""

from __future__ import annotations

import pytest
import torch

from posx.config.build import build_task
from posx.config.compose import compose
from posx.errors import ConfigError
from posx.tasks.synthetic.niah import NeedleTask


def parse(task: NeedleTask, row: list[int]) -> tuple[list[tuple[int, list[int]]], list[int], int]:
    """``(needles as (key, value) in prompt order, queried keys, SEP position)`` of one row."""
    sep = row.index(task.sep)
    prompt = row[1:sep]
    filler = range(task.first_filler, task.needle_mark)
    needles, i, seen_filler = [], 0, 0
    while i < len(prompt):
        if prompt[i] == task.needle_mark:
            key, value = prompt[i + 1], prompt[i + 2 : i + 2 + task.value_tokens]
            assert task.num_values <= key < task.num_values + task.num_keys
            assert all(v < task.num_values for v in value)
            needles.append((key, value))
            i += 2 + task.value_tokens
        else:
            # The filler is the repeating pattern, counted over filler tokens only.
            assert prompt[i] == filler[seen_filler % len(filler)]
            seen_filler += 1
            i += 1
    # After SEP: each asked key, then its values.
    step = 1 + task.values_per_key * task.value_tokens
    asked = [row[sep + 1 + j * step] for j in range(task.queries)]
    return needles, asked, sep


def solve(task: NeedleTask, row: list[int]) -> dict[int, int]:
    needles, asked, sep = parse(task, row)
    assert len(needles) == task.needles
    out: dict[int, int] = {}
    step = 1 + task.values_per_key * task.value_tokens
    for j, key in enumerate(asked):
        mine = [value for k, value in needles if k == key]
        assert len(mine) == task.values_per_key
        # The key sits at sep + 1 + j * step; its values are predicted from there on.
        at = sep + 1 + j * step
        out |= {at + i: t for i, t in enumerate(t for value in mine for t in value)}
    return out


SHAPES = [
    {"keys": 4, "values_per_key": 1, "queries": 1},  # multikey
    {"keys": 1, "values_per_key": 4, "queries": 1},  # multivalue
    {"keys": 4, "values_per_key": 1, "queries": 4},  # multiquery
    {"keys": 3, "values_per_key": 2, "queries": 2, "value_tokens": 3, "filler_tokens": 1},
]


@pytest.mark.parametrize("shape", SHAPES)
def test_niah_generator_is_right(task_checks, shape):
    check, vary = task_checks
    task = NeedleTask(**shape)
    fixed = task.footprint(0)
    lengths = [fixed, fixed + 9, 2 * fixed, 3 * fixed + 1]
    check(task, solve, lengths, lambda length: length + 1 - fixed)
    vary(task, 64)


def test_keys_are_distinct_and_distractors_never_the_queried_key():
    task = NeedleTask(keys=4, values_per_key=2, queries=2)
    batch = task.eval_set(96, 64, seed=0)
    for row in batch.inputs.tolist():
        needles, asked, _ = parse(task, row)
        keys = [k for k, _ in needles]
        assert len(set(keys)) == 4 and all(keys.count(k) == 2 for k in keys)
        assert len(set(asked)) == 2 and set(asked) <= set(keys)
        distractors = [k for k in keys if k not in asked]
        assert len(distractors) == 4 and not set(distractors) & set(asked)


def test_needles_spread_over_depths_and_queries_vary():
    """Needles are not always at the same place, and every key slot gets asked."""
    task = NeedleTask()
    batch = task.eval_set(128, 200, seed=0)
    first_needle = (batch.inputs == task.needle_mark).int().argmax(1)
    assert first_needle.min() <= 3 and first_needle.max() > 40
    depth_rank = []
    for row in batch.inputs.tolist():
        needles, (key,), _ = parse(task, row)
        depth_rank.append([k for k, _ in needles].index(key))
    assert set(depth_rank) == {0, 1, 2, 3}  # the asked needle is first, second, ... in the prompt


@pytest.mark.parametrize("name", ["niah_multikey", "niah_multivalue", "niah_multiquery"])
def test_yaml_length_stays_exact_at_every_eval_length(name):
    task = build_task(compose([f"task={name}"]))
    for length in (32, 64, 96, 128):
        data = task.eval_set(length, 16, seed=0)
        assert data.inputs.shape == (16, length)
        # The largest filler fits: the last value ends exactly at the last target, and only
        # values are scored (the asked keys after SEP are given).
        step = 1 + task.values_per_key * task.value_tokens
        tail = torch.arange(task.queries * step) % step != 0
        assert torch.equal(data.mask[:, -len(tail) :], tail.expand(16, -1))
        assert not data.mask[:, : -len(tail)].any()
        assert (data.inputs == task.needle_mark).sum(1).eq(task.needles).all()


def test_eval_depends_on_seed_and_length_only():
    task = NeedleTask()
    assert torch.equal(task.eval_set(64, 8, seed=2).inputs, task.eval_set(64, 8, seed=2).inputs)
    assert not torch.equal(task.eval_set(64, 8, seed=2).inputs, task.eval_set(64, 8, 3).inputs)


@pytest.mark.parametrize(
    "kwargs",
    [{"queries": 5}, {"keys": 17}, {"keys": 0}, {"value_tokens": 0}, {"num_values": 1}],
)
def test_niah_bad_arguments(kwargs):
    with pytest.raises(ConfigError):
        NeedleTask(**kwargs)
