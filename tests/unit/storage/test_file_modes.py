"""Files posx writes follow the user's umask, read when writing: colleagues sharing a results
directory can read checkpoints and tables (mkstemp/mkdtemp alone would make them 0600/0700)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import torch

from posx.storage.atomic import umask
from posx.storage.checkpoint import save_checkpoint
from posx.storage.results import write_json


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_checkpoint_and_results_follow_the_umask(tmp_path: Path, mask: int):
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    old = os.umask(mask)
    try:
        assert umask() == mask
        save_checkpoint(tmp_path, model, optimizer, {"step": 1, "tokens": 2}, {"r": torch.ones(1)})
        write_json(tmp_path / "run.json", {"status": "trained"})
    finally:
        os.umask(old)
    checkpoint = tmp_path / "checkpoint"
    assert mode(checkpoint) == 0o777 & ~mask
    files = sorted(checkpoint.iterdir())
    assert [f.name for f in files] == [
        "model.safetensors",
        "optimizer.safetensors",
        "trainer.json",
        "trainer.safetensors",
    ]
    for path in [*files, tmp_path / "run.json"]:
        assert mode(path) == 0o666 & ~mask, path.name
