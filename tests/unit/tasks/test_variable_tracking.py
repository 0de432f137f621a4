"""VariableTrackingTask (vt): a solver that follows the assignments like an interpreter."""

from __future__ import annotations

import pytest
import torch

from posx.config.build import build_task
from posx.config.compose import compose
from posx.errors import ConfigError
from posx.tasks.synthetic.variable_tracking import VariableTrackingTask


def statements(
    task: VariableTrackingTask, row: list[int]
) -> tuple[list[tuple[int, int]], int, int]:
    """``(assignments (target, source) in prompt order, asked value, SEP position)``."""
    sep = row.index(task.sep)
    prompt = row[1:sep]
    out, i = [], 0
    while i < len(prompt):
        if prompt[i] == task.let:
            out.append((prompt[i + 1], prompt[i + 2]))
            i += 3
        else:
            assert task.first_filler <= prompt[i] < task.let, "only filler between statements"
            i += 1
    return out, row[sep + 1], sep


def is_var(task: VariableTrackingTask, token: int) -> bool:
    return token < task.num_vars


def solve(task: VariableTrackingTask, row: list[int]) -> dict[int, int]:
    assigns, asked, sep = statements(task, row)
    assert len(assigns) == task.chains * (task.hops + 1)
    env: dict[int, int] = {}
    holders: list[int] = []
    for target, source in assigns:
        assert is_var(task, target) and target not in env, "each variable assigned once"
        # A source variable is always assigned before it is read: chains come in order.
        value = env[source] if is_var(task, source) else source
        env[target] = value
        if value == asked:
            holders.append(target)
    assert len(holders) == task.hops + 1
    # The asked value sits at sep + 1; the variables are predicted from there on.
    return {sep + 1 + i: v for i, v in enumerate(holders)}


@pytest.mark.parametrize(("hops", "chains"), [(4, 1), (2, 2), (1, 3), (3, 4)])
def test_vt_generator_is_right(task_checks, hops, chains):
    check, vary = task_checks
    task = VariableTrackingTask(hops=hops, chains=chains)
    fixed = task.footprint(0)
    lengths = [fixed, fixed + 5, 2 * fixed, 4 * fixed + 3]
    check(task, solve, lengths, lambda length: length + 1 - fixed)
    vary(task, 2 * fixed)


def test_hops_chain_correctly_and_distractor_chains_hold_other_values():
    task = VariableTrackingTask(hops=3, chains=3)
    for row in task.eval_set(96, 32, seed=0).inputs.tolist():
        assigns, asked, _ = statements(task, row)
        roots = [(t, s) for t, s in assigns if not is_var(task, s)]
        assert len(roots) == 3 and len({s for _, s in roots}) == 3, "one value per chain"
        assert asked in {s for _, s in roots}
        # Each chain is a path: every variable read exactly once, by the next hop.
        reads = [s for _, s in assigns if is_var(task, s)]
        assert len(reads) == len(set(reads)) == 3 * 3
        targets = [t for t, _ in assigns]
        assert len(set(targets)) == 12


def test_statements_interleave_across_chains():
    """Chains are not laid out one after another: distractor statements sit between hops."""
    task = VariableTrackingTask(hops=2, chains=2)
    interleaved = 0
    for row in task.eval_set(64, 64, seed=0).inputs.tolist():
        assigns, asked, sep = statements(task, row)
        holders = set(solve(task, row).values())
        mine = [t in holders for t, _ in assigns]
        first, last = mine.index(True), len(mine) - 1 - mine[::-1].index(True)
        interleaved += not all(mine[first : last + 1])
    assert 10 < interleaved < 64


def test_yaml_length_stays_exact_at_every_eval_length():
    task = build_task(compose(["task=vt"]))
    for length in (32, 64, 96, 128):
        data = task.eval_set(length, 16, seed=0)
        assert data.inputs.shape == (16, length)
        assert data.mask[:, -(task.hops + 1) :].all() and not data.mask[:, : -(task.hops + 1)].any()
        assert (data.inputs == task.let).sum(1).eq(task.chains * (task.hops + 1)).all()


def test_eval_is_seeded():
    task = VariableTrackingTask()
    assert torch.equal(task.eval_set(64, 8, seed=1).inputs, task.eval_set(64, 8, seed=1).inputs)


@pytest.mark.parametrize(
    "kwargs", [{"hops": 0}, {"chains": 0}, {"num_vars": 4}, {"chains": 3, "num_values": 2}]
)
def test_vt_bad_arguments(kwargs):
    with pytest.raises(ConfigError):
        VariableTrackingTask(**kwargs)
