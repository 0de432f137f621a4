"""cwe and fwe: solvers that count the list and check the answer is the unique right one."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from posx.config.build import build_task
from posx.config.compose import compose
from posx.errors import ConfigError
from posx.tasks.synthetic.aggregation import CommonItemsTask, FrequentItemsTask


def counted(task, row: list[int]) -> tuple[Counter[int], int]:
    sep = row.index(task.sep)
    return Counter(row[1:sep]), sep


def solve_cwe(task: CommonItemsTask, row: list[int]) -> dict[int, int]:
    counts, sep = counted(task, row)
    common = sorted(x for x, c in counts.items() if c == task.common_repeats)
    assert len(common) == task.common
    # Counts make the answer unique: everything else appears exactly uncommon_repeats times.
    assert all(c == task.uncommon_repeats for x, c in counts.items() if x not in common)
    return {sep + i: x for i, x in enumerate(common)}


def solve_fwe(task: FrequentItemsTask, row: list[int]) -> dict[int, int]:
    counts, sep = counted(task, row)
    assert counts.most_common(1)[0][0] == task.noise
    del counts[task.noise]
    ranked = counts.most_common()
    top = [x for x, _ in ranked[: task.answers]]
    # Unique: each answer strictly more frequent than the next item (or the next is absent).
    freq = [c for _, c in ranked] + [0]
    assert all(freq[i] > freq[i + 1] for i in range(task.answers))
    return {sep + i: x for i, x in enumerate(top)}


@pytest.mark.parametrize(("common", "rc", "ru"), [(3, 4, 1), (1, 2, 1), (4, 5, 2)])
def test_cwe_generator_is_right(task_checks, common, rc, ru):
    check, vary = task_checks
    task = CommonItemsTask(common=common, common_repeats=rc, uncommon_repeats=ru)
    fixed = common * (rc + 1) + 2
    lengths = [fixed - 1 + ru, 40, 64, 128]
    check(task, solve_cwe, lengths, lambda length: (length + 1 - fixed) // ru)
    vary(task, 64)


@pytest.mark.parametrize(("answers", "alpha"), [(3, 2.0), (1, 1.5), (2, 3.0)])
def test_fwe_generator_is_right(task_checks, answers, alpha):
    check, vary = task_checks
    task = FrequentItemsTask(answers=answers, alpha=alpha)
    lengths = [task.footprint(1) - 1, 33, 64, 129, 256]
    check(task, solve_fwe, lengths, task.size_for)
    vary(task, 64)


def test_fwe_counts_follow_zipf_and_stay_unique_at_every_scale():
    task = FrequentItemsTask()
    sizes = torch.arange(1, 400)
    counts = task.counts(sizes)
    assert (counts[:, : task.answers + 1] > counts[:, 1 : task.answers + 2]).all()
    assert (counts[:, 1:] <= counts[:, :-1]).all(), "Zipf counts never rise with rank"
    assert (counts.sum(1)[1:] >= counts.sum(1)[:-1]).all(), "the footprint is monotone"
    # Large scales are RULER's floor(n / (zeta(2) r^2)) untouched (zeta(2) = pi^2 / 6).
    ruler = [math.floor(1000 / (math.pi**2 / 6 * r**2)) for r in range(1, 8)]
    assert task.counts(torch.tensor([1000]))[0, :7].tolist() == ruler


def test_fwe_mapping_is_the_largest_scale_that_fits():
    task = FrequentItemsTask()
    for length in (32, 64, 128):
        n = task.size_for(length)
        assert task.footprint(n) <= length + 1 < task.footprint(n + 1)


@pytest.mark.parametrize("name", ["cwe", "fwe"])
def test_yaml_length_stays_exact_at_every_eval_length(name):
    task = build_task(compose([f"task={name}"]))
    for length in (32, 64, 96, 128):
        data = task.eval_set(length, 16, seed=0)
        assert (
            data.inputs.shape == (16, length)
            and data.mask.sum(1).eq(task.common if name == "cwe" else task.answers).all()
        )


def test_cwe_needs_enough_items():
    task = CommonItemsTask(common=3, num_items=20)
    task.eval_set(32, 2, seed=0)  # 3 common + 16 uncommon = 19 items: fits
    with pytest.raises(ConfigError, match="distinct items"):
        task.eval_set(64, 2, seed=0)


@pytest.mark.parametrize(
    "kwargs",
    [{"common": 0}, {"common_repeats": 1}, {"uncommon_repeats": 4}, {"num_items": 3}],
)
def test_cwe_bad_arguments(kwargs):
    with pytest.raises(ConfigError):
        CommonItemsTask(**kwargs)


@pytest.mark.parametrize("kwargs", [{"answers": 0}, {"alpha": 1.0}, {"num_items": 3}])
def test_fwe_bad_arguments(kwargs):
    with pytest.raises(ConfigError):
        FrequentItemsTask(**kwargs)
