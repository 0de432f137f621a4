"""RunRecord: the status writes of run.json and the errors that name the kept checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from posx.config.compose import compose
from posx.errors import Interrupted, PosxError
from posx.runtime.distributed import World
from posx.saved import SavedRun
from posx.saved.process import this_process
from posx.training.record import RunRecord, run_meta

META = {"run": "r", "parameters": 3}


def status(run_dir) -> dict:  # noqa: ANN001
    return json.loads((run_dir / "run.json").read_text())


def test_statuses_extend_the_meta_in_order(tmp_path):
    record = RunRecord(tmp_path, META, World())
    record.training(resumed_from=None)
    process = this_process()  # who trains it: posx extend and resume ask (issue 48)
    assert status(tmp_path) == {**META, "status": "training", "resumed_from": None,
                                "process": process}  # fmt: skip
    assert list(status(tmp_path)) == ["run", "parameters", "status", "resumed_from", "process"]
    record.trained({"final_loss": 1.5, "world_size": 1})
    assert status(tmp_path) == {**META, "status": "trained", "final_loss": 1.5, "world_size": 1}


def test_failure_names_the_last_checkpoint(tmp_path):
    record = RunRecord(tmp_path, META, World())
    err = record.failed("loss became nan", 3)
    assert isinstance(err, PosxError)
    assert str(err) == (
        "loss became nan at step 3; training stopped, "
        "no checkpoint was saved (train.checkpoint_every=N keeps one)"
    )
    record.checkpointed(4)
    err = record.failed("the weights became non-finite", 5)
    message = (
        "the weights became non-finite at step 5; training stopped, "
        "the checkpoint of step 4 is kept"
    )
    assert str(err) == message
    assert status(tmp_path) == {**META, "status": "failed", "step": 5, "error": message}


def test_interrupted_says_how_to_resume(tmp_path):
    err = RunRecord(tmp_path, META, World(), saved=7).interrupted(7)
    assert isinstance(err, Interrupted)
    assert str(err) == f"interrupted at step 7; checkpoint saved; run: posx resume {tmp_path}"
    assert status(tmp_path) == {**META, "status": "interrupted", "step": 7}


@pytest.mark.parametrize("method", ["training", "failed", "interrupted", "trained"])
def test_only_rank_0_writes(tmp_path, method):
    record = RunRecord(tmp_path, META, World(rank=1, size=2))
    args = {"training": (None,), "failed": ("x", 1), "interrupted": (1,), "trained": ({},)}
    getattr(record, method)(*args[method])
    assert not (tmp_path / "run.json").exists()


NAMES = {"encoding": "rope", "task": "copy", "model": "tiny"}


@pytest.mark.parametrize(("device", "resolved"), [("cuda", "bf16"), ("cpu", "fp32")])
def test_run_meta_records_what_auto_precision_resolved_to(tmp_path, device, resolved):
    """The CUDA branch of ``precision=auto`` runs here on the CPU: only the device object says
    cuda. What it resolves to is recorded and is part of the fingerprint."""
    cfg = compose(["task=copy", "train.length=16"])
    meta = run_meta(cfg, tmp_path, NAMES, {}, torch.device(device))
    assert (meta["train_precision"], meta["eval_precision"]) == (resolved, resolved)
    assert meta["fingerprint"] == SavedRun(tmp_path).fingerprint_with(cfg, meta)
    explicit = compose(["task=copy", "train.length=16", "eval.precision=fp16"])
    assert run_meta(explicit, tmp_path, NAMES, {}, torch.device(device))["eval_precision"] == "fp16"


def test_a_cuda_run_and_a_cpu_run_of_one_config_have_different_fingerprints(tmp_path):
    cfg = compose(["task=copy", "train.length=16"])
    gpu = run_meta(cfg, tmp_path, NAMES, {}, torch.device("cuda", 0))
    cpu = run_meta(cfg, tmp_path, NAMES, {}, torch.device("cpu"))
    assert gpu["fingerprint"] != cpu["fingerprint"]
    fp32 = compose(["task=copy", "train.length=16", "train.precision=fp32", "eval.precision=fp32"])
    same = [
        run_meta(fp32, tmp_path, NAMES, {}, torch.device(d))["fingerprint"] for d in ("cuda", "cpu")
    ]
    assert same[0] == same[1]  # where it ran is not the experiment; the precision is
