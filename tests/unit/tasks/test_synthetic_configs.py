"""Every synthetic task yaml builds through the real config path and generates batches."""

from __future__ import annotations

import re

import pytest
import torch

from posx.config.build import build_task
from posx.config.compose import compose
from posx.config.paths import choices, describe_option
from posx.tasks.synthetic.common import SyntheticTask

TEXT_TASKS = {"text", "text_bpe", "shakespeare"}
SYNTHETIC = [name for name in choices("task") if name not in TEXT_TASKS]


def test_at_least_twelve_synthetic_tasks():
    assert len(SYNTHETIC) >= 12


@pytest.mark.parametrize("name", SYNTHETIC)
def test_task_yaml_builds_and_generates(name):
    task = build_task(compose([f"task={name}"]))
    assert isinstance(task, SyntheticTask) and task.exact_match
    # The yaml's description states the length mapping (what `posx list task` shows).
    assert re.search(r"length L holds", describe_option("task", name))
    # Lengths count the task's unit: tokens, or digits for arithmetic (laid out in more tokens).
    short, long = (64, 128) if task.length_unit == "tokens" else (8, 16)
    batch = task.train_batch(4, short, torch.Generator().manual_seed(0))
    assert batch.inputs.shape == (4, task.tokens_for(short)) and batch.mask.any(1).all()
    data = task.eval_set(long, 4, seed=0)
    assert data.inputs.shape == (4, task.tokens_for(long)) and data.mask.any(1).all()
    assert data.inputs.max() < task.vocab_size
    assert task.describe()["length_mapping"]
