"""PasskeyTask: the solver finds the KEY marker and reads the digits after it."""

from __future__ import annotations

import math

import pytest
import torch

from posx.errors import ConfigError
from posx.tasks.synthetic.passkey import PasskeyTask


def solve(task: PasskeyTask, row: list[int]) -> dict[int, int]:
    sep = row.index(task.sep)
    prompt = row[1:sep]
    at = prompt.index(task.key)
    passkey = prompt[at + 1 : at + 1 + task.digits]
    filler = [t for i, t in enumerate(prompt) if not at <= i <= at + task.digits]
    # The filler is the fixed repeating pattern, wherever the key interrupts it.
    assert filler == [10 + i % task.filler_tokens for i in range(len(filler))]
    return {sep + i: d for i, d in enumerate(passkey)}


@pytest.mark.parametrize(("digits", "filler"), [(5, 8), (1, 1), (3, 5)])
def test_passkey_generator_is_right(task_checks, digits, filler):
    check, vary = task_checks
    task = PasskeyTask(digits=digits, filler_tokens=filler)
    check(task, solve, [2 * digits + 3, 40, 128], lambda n: n - 2 - 2 * digits)
    vary(task, 64)


def test_eval_depths_cover_every_bucket_equally():
    task = PasskeyTask()
    data = task.eval_set(112, 50, seed=0)  # n = 100 filler tokens
    frac = task.depth_fraction(data.inputs)
    assert frac.min() < 0.02 and frac.max() > 0.98
    bucket = (frac * 5).long().clamp(max=4)
    assert torch.bincount(bucket, minlength=5).tolist() == [10] * 5


def test_train_depths_reach_both_ends():
    task = PasskeyTask()
    data = task.train_batch(400, 40, torch.Generator().manual_seed(0))
    key_at = (data.inputs == task.key).int().argmax(1)
    assert key_at.min() == 1  # depth 0: right after BOS
    filler = ((data.inputs >= 10) & (data.inputs < task.key)).sum(1)
    assert (key_at - 1 == filler).any()  # depth n: right before SEP


def test_sequence_metrics_by_depth_bucket():
    task = PasskeyTask(depth_buckets=4)
    data = task.eval_set(52, 8, seed=0)  # two sequences per bucket, in depth order
    correct = torch.tensor([True, True, True, False, False, False, True, True])
    metrics = task.sequence_metrics(data, correct)
    assert list(metrics) == [
        "acc_depth_0_25",
        "acc_depth_25_50",
        "acc_depth_50_75",
        "acc_depth_75_100",
    ]
    assert list(metrics.values()) == [1.0, 0.5, 0.0, 1.0]


def test_sequence_metrics_empty_bucket_is_nan():
    task = PasskeyTask(depth_buckets=5)
    data = task.eval_set(40, 1, seed=0)  # one sequence at depth 0.5
    metrics = task.sequence_metrics(data, torch.tensor([True]))
    assert metrics["acc_depth_40_60"] == 1.0
    assert math.isnan(metrics["acc_depth_0_20"])


@pytest.mark.parametrize("kwargs", [{"digits": 0}, {"filler_tokens": 0}, {"depth_buckets": 0}])
def test_passkey_bad_arguments(kwargs):
    with pytest.raises(ConfigError):
        PasskeyTask(**kwargs)
