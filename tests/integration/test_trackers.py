"""A tiny sweep with every tracker at once (W&B offline, MLflow file store), then `posx eval`
with an eval-time variant: each tool's own reader finds the config, the training curves, every
eval row, and the sweep's grouping."""

from __future__ import annotations

import json
import os

import pytest

YARN = ["encoding.scaling.type=yarn", "encoding.scaling.factor=4"]


@pytest.mark.slow
def test_sweep_with_every_tracker_reads_back(posx, tiny_overrides, tmp_path, read_wandb,
                                             monkeypatch):  # fmt: skip
    for package in ("tensorboard", "mlflow"):
        pytest.importorskip(package, reason=f"logger={package} needs the {package} extra")
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("WANDB_MODE", "offline")  # the posx subprocesses inherit it
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # this process reads the store too
    store = tmp_path / "mlruns"
    out = posx("train", "-m", "encoding=nope,rope", *tiny_overrides, "train.steps=20",
               "logger=[tensorboard,wandb,mlflow]", f"logger.mlflow.tracking_uri={store}",
               check=True).stdout  # fmt: skip
    (sweep,) = (tmp_path / "sweeps").iterdir()
    assert f"sweep directory: {sweep}" in out and f"sweep done: 2 job(s) in {sweep}" in out
    runs = sorted(p.parent for p in sweep.rglob("run.json"))
    rope = next(r for r in runs if "_rope_" in r.name)
    # an eval-time variant later: its rows go to the run's trackers too
    posx("eval", str(rope), "--lengths", "16,32", *YARN, check=True)

    # TensorBoard: one event directory per run, all below the sweep's directory
    for run in runs:
        acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
        acc.Reload()
        assert [e.step for e in acc.Scalars("train/loss")] == [10, 20]
        enc = "rope" if run == rope else "nope"
        assert [e.step for e in acc.Scalars(f"eval/{enc}/exact_match")] == [16, 32]
    acc = EventAccumulator(str(rope / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("eval/rope+yarn×4/loss")] == [16, 32]

    # W&B: offline runs grouped by the sweep, with config, curves and eval rows
    for run in runs:
        files = sorted(run.glob("wandb/offline-run-*/run-*.wandb"))
        assert len(files) == (2 if run == rope else 1)  # posx eval reopened the run
        records = [r for f in files for r in read_wandb(f)]
        starts = [r.run for r in records if r.WhichOneof("record_type") == "run"]
        assert {s.run_group for s in starts} == {sweep.name}
        assert len({s.run_id for s in starts}) == 1  # one W&B run, resumed
        keys = {i.key or "/".join(i.nested_key) for r in records
                if r.WhichOneof("record_type") == "history" for i in r.history.item}  # fmt: skip
        assert {"train/loss", "train/lr", "train/tokens_per_s", "train/grad_norm"} <= keys
        config = {u.key for s in starts for u in s.config.update}
        assert {"model", "encoding", "train", "logger"} <= config
    assert "eval/rope+yarn×4/loss" in {
        i.key or "/".join(i.nested_key) for f in rope.glob("wandb/*/run-*.wandb")
        for r in read_wandb(f)
        if r.WhichOneof("record_type") == "history" for i in r.history.item
    }  # fmt: skip

    # MLflow: a parent run for the sweep, one child per job
    assert os.environ["MLFLOW_ALLOW_FILE_STORE"] == "true"
    client = MlflowClient(tracking_uri=store.as_uri())
    (experiment,) = [e for e in client.search_experiments() if e.name == "posx"]
    found = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in found if r.info.run_name == sweep.name]
    children = [r for r in found if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.info.run_name for r in children) == [r.name for r in runs]
    for child in children:
        assert child.data.params["train.steps"] == "20"
        assert [m.step for m in client.get_metric_history(child.info.run_id, "train/loss")] == [
            10, 20
        ]  # fmt: skip
    (rope_run,) = [r for r in children if r.info.run_name == rope.name]
    yarn = client.get_metric_history(rope_run.info.run_id, "eval/rope_yarnx4/loss")
    assert sorted(m.step for m in yarn) == [16, 32]
    state = json.loads((rope / "trackers.json").read_text())
    assert set(state) == {"tensorboard", "wandb", "mlflow"}
    assert state["mlflow"]["run_id"] == rope_run.info.run_id
