"""InductionTask: the solver searches the prompt for the cue and copies what follows."""

from __future__ import annotations

import pytest
import torch

from posx.errors import ConfigError
from posx.tasks.synthetic.induction import InductionTask


def solve(task: InductionTask, row: list[int]) -> dict[int, int]:
    sep = row.index(task.sep)
    prompt = row[1:sep]
    cue = row[sep + 1 : sep + 1 + task.cue]
    at = next(i for i in range(len(prompt)) if prompt[i : i + task.cue] == cue)
    follow = prompt[at + task.cue : at + task.cue + task.segment]
    assert len(follow) == task.segment
    return {sep + task.cue + k: tok for k, tok in enumerate(follow)}


@pytest.mark.parametrize(("symbols", "cue", "segment"), [(16, 3, 8), (2, 1, 1), (3, 2, 4)])
def test_induction_generator_is_right(task_checks, symbols, cue, segment):
    # Tiny alphabets make repeated cues common, exercising the first-occurrence rule.
    check, vary = task_checks
    task = InductionTask(num_symbols=symbols, cue=cue, segment=segment, min_size=cue + segment)
    lengths = [2 * (cue + segment) + 1, 40, 128]
    check(task, solve, lengths, lambda n: n - 1 - cue - segment)
    vary(task, 128)


def test_segment_starts_spread_over_the_prompt():
    task = InductionTask(num_symbols=64, cue=3, segment=4, min_size=7)
    data = task.eval_set(200, 200, seed=0)
    n = task.size_for(200)
    starts = []
    for row in data.inputs.tolist():
        cue = row[n + 2 : n + 5]
        starts.append(next(i for i in range(n) if row[1 + i : 4 + i] == cue))
    assert min(starts) < n // 10 and max(starts) > n - n // 5


@pytest.mark.parametrize(
    "kwargs", [{"cue": 0}, {"segment": 0}, {"min_size": 5}, {"num_symbols": 1}]
)
def test_induction_bad_arguments(kwargs):
    with pytest.raises(ConfigError):
        InductionTask(**kwargs)


def test_other_tasks_have_no_sequence_metrics():
    data = InductionTask().eval_set(64, 4, seed=0)
    assert InductionTask().sequence_metrics(data, torch.ones(4, dtype=torch.bool)) == {}
