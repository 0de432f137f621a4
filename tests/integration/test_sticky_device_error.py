"""A CUDA error stays with the process that hit it (misaligned address, illegal access,
device-side assert): in a sweep every later job of that process then fails too. On an H200 a
Transformer-XL job's error made the next job (floater) fail with the same words and no
explanation; the failed job's message now says so, in run.json and on stderr."""

from __future__ import annotations

import json

import pytest
import torch

from posx.runs import job

ACCELERATOR_ERROR = getattr(torch, "AcceleratorError", None)


@pytest.mark.skipif(ACCELERATOR_ERROR is None, reason="this torch has no AcceleratorError")
def test_a_sweep_job_with_a_device_error_says_later_jobs_of_its_process_fail(
    cli, tiny_overrides, tmp_path, monkeypatch
):
    def boom(cfg, *args, **kwargs):
        if cfg.encoding._target_.endswith("ALiBi"):
            raise ACCELERATOR_ERROR("CUDA error: misaligned address")
        return real(cfg, *args, **kwargs)

    real = job.train_and_evaluate
    monkeypatch.setattr(job, "train_and_evaluate", boom)
    out = cli("train", "-m", "encoding=alibi,nope", *tiny_overrides)
    assert out.returncode != 0
    failed = [
        json.loads(p.read_text())
        for p in (tmp_path / "sweeps").rglob("run.json")
        if json.loads(p.read_text()).get("status") == "failed"
    ]
    assert len(failed) == 1
    error = failed[0]["error"]
    assert error.startswith("AcceleratorError: CUDA error: misaligned address")
    assert "later jobs of this sweep in the same process fail too" in error
    assert "later jobs of this sweep in the same process fail too" in out.stderr


def test_other_errors_carry_no_such_note(cli, tiny_overrides, tmp_path, monkeypatch):
    def boom(cfg, *args, **kwargs):
        raise RuntimeError("something else")

    monkeypatch.setattr(job, "train_and_evaluate", boom)
    out = cli("train", "-m", "encoding=alibi", *tiny_overrides)
    assert out.returncode != 0
    assert "RuntimeError: something else" in out.stderr
    assert "same process" not in out.stderr
