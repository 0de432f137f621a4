"""Run files: atomic writes, locked row merges, checkpoint round trips."""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path

import pandas as pd
import pytest
import torch

from posx.errors import PosxError
from posx.storage.checkpoint import checkpoint_dir, load_checkpoint, save_checkpoint
from posx.storage.results import atomic_write, merge_rows


def test_atomic_write_keeps_old_file_when_interrupted(tmp_path, monkeypatch):
    path = tmp_path / "eval.csv"
    atomic_write(path, "old\n")

    def boom(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["eval.csv"]  # no temp file left


def test_merge_rows_replaces_same_key_and_keeps_others(tmp_path):
    path = tmp_path / "eval.csv"
    keys = ["eval_length", "overrides"]
    merge_rows(
        path,
        [
            {"eval_length": 16, "overrides": "", "loss": 1.0},
            {"eval_length": 32, "overrides": "", "loss": 2.0},
        ],
        keys,
    )
    merge_rows(
        path,
        [
            {"eval_length": 16, "overrides": "", "loss": 0.5},
            {"eval_length": 16, "overrides": "a=1", "loss": 9.0},
        ],
        keys,
    )
    frame = pd.read_csv(path, keep_default_na=False)
    got = sorted(zip(frame["eval_length"], frame["overrides"], frame["loss"], strict=True))
    assert got == [(16, "", 0.5), (16, "a=1", 9.0), (32, "", 2.0)]


def _merge_many(path: str, worker: int) -> None:
    for i in range(15):
        merge_rows(Path(path), [{"worker": worker, "i": i, "loss": float(i)}], ["worker", "i"])


def test_concurrent_merges_lose_no_rows(tmp_path):
    path = tmp_path / "eval.csv"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_merge_many, args=(str(path), w)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    frame = pd.read_csv(path)
    assert len(frame) == 30 and not frame.duplicated(["worker", "i"]).any()


def test_checkpoint_round_trip_with_tied_weights(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight  # tied, as in the LM
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.arange(5)).sum().backward()
    opt.step()
    save_checkpoint(tmp_path, model, opt, {"step": 7})
    save_checkpoint(tmp_path, model, opt, {"step": 8})  # swap over an existing one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]

    clone = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    clone[1].weight = clone[0].weight
    clone_opt = torch.optim.AdamW(clone.parameters(), lr=0.1)
    state = load_checkpoint(tmp_path, clone, clone_opt)
    assert state["step"] == 8
    assert torch.equal(clone[0].weight, model[0].weight)
    a, b = opt.state_dict()["state"], clone_opt.state_dict()["state"]
    assert all(torch.equal(a[k]["exp_avg_sq"], b[k]["exp_avg_sq"]) for k in a)


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(PosxError, match="run has no checkpoint"):
        checkpoint_dir(tmp_path)
