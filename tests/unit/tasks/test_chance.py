"""Each synthetic task's chance level: the exact match of the best prompt-blind answer."""

from __future__ import annotations

import pytest

from posx.tasks.synthetic.copy import CopyTask
from posx.tasks.synthetic.dyck import DyckTask
from posx.tasks.synthetic.majority import MajorityTask
from posx.tasks.synthetic.modular import ModularSumTask
from posx.tasks.text import TextTask


@pytest.mark.parametrize("modulus", [2, 5])
def test_modular_chance_is_one_over_the_modulus(modulus):
    task = ModularSumTask(modulus=modulus)
    data = task.eval_set(32, 2000, seed=0)
    assert task.chance(data) == pytest.approx(1 / modulus, abs=0.03)
    answers = data.targets[data.mask]
    assert task.chance(data) == max(answers.bincount().tolist()) / 2000  # the best constant


def test_majority_and_dyck_chance_is_the_most_common_answer():
    # Ties go to symbol 0 and random strings are mostly unbalanced: above 1 / answers.
    assert 0.25 < MajorityTask(num_symbols=4).chance(MajorityTask(4).eval_set(8, 2000, 0)) < 0.6
    dyck = DyckTask()
    assert 0.5 <= dyck.chance(dyck.eval_set(16, 2000, 0)) < 0.6


def test_many_token_answers_have_no_chance():
    task = CopyTask()
    assert task.chance(task.eval_set(32, 100, seed=0)) == 0.0
    assert not TextTask.exact_match  # text rows record no chance at all
