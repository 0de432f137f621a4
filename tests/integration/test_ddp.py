"""Two-process DDP on CPU (gloo) trains the same model as one process with the same global batch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_two_process_ddp_matches_single_process(posx, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes((REPO / "README.md").read_bytes())  # any text of this repo
    args = [
        "task=text",
        f"task.corpus={corpus}",
        "model.d_model=32",
        "model.n_layers=1",
        "train.length=16",
        "train.steps=20",
        "train.batch_size=8",
        "train.log_every=5",
        "train.progress=false",
        "eval.lengths=[16]",
        "eval.tokens=256",
        "train.threads=1",
    ]
    env = {**os.environ, "POSX_DEBUG": "1", "OMP_NUM_THREADS": "1"}
    ddp = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "-m",
            "posx",
            "train",
            *args,
            f"root={tmp_path / 'ddp'}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    posx("train", *args, f"root={tmp_path / 'one'}", check=True)

    (ddp_run,) = [p.parent for p in (tmp_path / "ddp").rglob("run.json")]  # rank 0 wrote alone
    (one_run,) = [p.parent for p in (tmp_path / "one").rglob("run.json")]
    a, b = pd.read_csv(ddp_run / "metrics.csv"), pd.read_csv(one_run / "metrics.csv")
    assert list(a["step"]) == list(b["step"]) and list(a["tokens"]) == list(b["tokens"])
    assert torch.allclose(torch.tensor(a["loss"]), torch.tensor(b["loss"]), rtol=1e-4)
    wa = load_file(str(ddp_run / "checkpoint" / "model.safetensors"))
    wb = load_file(str(one_run / "checkpoint" / "model.safetensors"))
    assert all(torch.allclose(wa[k], wb[k], atol=1e-4) for k in wa)
    assert (ddp_run / "eval.csv").is_file()
