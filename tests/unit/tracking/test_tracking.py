"""Experiment trackers: what each records, read back with the tool's own reader; missing extras
and unknown loggers as one-line errors before training."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from posx import tracking
from posx.config.compose import compose
from posx.config.fingerprint import config_fingerprint
from posx.errors import ConfigError
from posx.saved import SavedRun
from posx.tracking import check_loggers, log_eval_rows, open_trackers
from posx.tracking.base import variant
from posx.tracking.mlflow import metric_key

NAMES = {"encoding": "rope", "task": "copy", "model": "tiny", "positions": "default"}
YARN = "encoding.scaling.factor=4 encoding.scaling.type=yarn"


def train_rows() -> list[dict]:
    return [{"step": s, "loss": 3.0 - s / 10, "lr": 1e-3 * s, "tokens": 100 * s,
             "tokens_per_s": 500.0 + s, "grad_norm": 1.0 / s, "seconds": s / 10}
            for s in (10, 20, 30)]  # fmt: skip


def eval_rows(overrides: str = "") -> list[dict]:
    base = {"encoding": "rope", "mode": "full", "overrides": overrides, "reason": ""}
    return [
        {**base, "eval_length": 16, "status": "ok", "loss": 1.0, "acc": 0.5, "exact_match": 0.25},
        {**base, "eval_length": 32, "status": "ok", "loss": 2.0, "acc": 0.4, "exact_match": 0.0},
        {**base, "eval_length": 64, "status": "failed", "reason": "out of memory"},
    ]


def setup(tmp_path: Path, *logger: str) -> tuple:
    cfg = compose(["task=copy", "train.length=16", f"root={tmp_path}", *logger])
    run = tmp_path / "runs" / "copy_rope_L16_s0_x"
    run.mkdir(parents=True)
    return cfg, run


def test_tensorboard_records_curves_eval_rows_and_config(tmp_path):
    pytest.importorskip("tensorboard", reason="logger=tensorboard needs the tensorboard extra")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg, run = setup(tmp_path, "logger=tensorboard")
    with open_trackers(cfg, run, NAMES) as trackers:
        for row in train_rows():
            trackers.log_train(row)
        trackers.log_eval(eval_rows())
    state = json.loads((run / "trackers.json").read_text())
    assert state == {"tensorboard": {"dir": str((run / "tensorboard").resolve())}}
    # posx eval later: a variant's rows go to the same event directory
    assert log_eval_rows_for(run, cfg, eval_rows(YARN)) == []

    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    scalars = acc.Tags()["scalars"]
    for key in ("train/loss", "train/lr", "train/tokens_per_s", "train/grad_norm"):
        assert [e.step for e in acc.Scalars(key)] == [10, 20, 30], key
    assert [e.value for e in acc.Scalars("train/loss")] == pytest.approx([2.0, 1.0, 0.0])
    for name in ("rope", "rope+yarn×4"):
        got = acc.Scalars(f"eval/{name}/exact_match")
        assert [(e.step, e.value) for e in got] == [(16, 0.25), (32, 0.0)], name
    assert not any(t.startswith("eval/") and "64" in t for t in scalars)  # the failed row
    texts = {t for t in acc.Tags()["tensors"]}
    config = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "eval/text_summary" in texts and "d_model: 64" in config


def log_eval_rows_for(run: Path, cfg, rows: list[dict]) -> list[str]:
    """posx eval's path: the run's saved config and run.json say which trackers to reopen."""
    from omegaconf import OmegaConf

    (run / ".hydra").mkdir(exist_ok=True)
    (run / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    ident = {"encoding": "rope", "task": "copy", "model": "tiny", "seed": 0, "train_length": 16}
    (run / "run.json").write_text(json.dumps({"schema_version": 1, "run": run.name, **ident}))
    return log_eval_rows(SavedRun(run), rows)


def test_missing_package_is_one_line_naming_the_extra(tmp_path, monkeypatch, cli):
    monkeypatch.setattr(tracking, "installed", lambda package: package != "wandb")
    cfg, _ = setup(tmp_path, "logger=[tensorboard,wandb]")
    with pytest.raises(ConfigError, match=r"^logger=wandb needs the wandb package: "
                       r"pip install 'posx\[wandb\]'$"):  # fmt: skip
        check_loggers(cfg)
    root = tmp_path / "res"
    out = cli("train", "task=copy", "train.length=16", f"root={root}", "logger=[tensorboard,wandb]")
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        "posx: error: logger=wandb needs the wandb package: pip install 'posx[wandb]'"
    ]
    assert not root.exists()  # checked before any run directory is made


def test_unknown_logger_names_the_choices(cli, tmp_path):
    out = cli("train", f"root={tmp_path}", "logger=[tensorboard,neptune]")
    assert out.returncode == 2
    assert "unknown logger 'neptune'; choose from: mlflow, none, tensorboard, wandb" in out.stderr


def test_trackers_are_not_part_of_the_experiment(tmp_path):
    plain, _ = setup(tmp_path)
    tracked = compose(["task=copy", "train.length=16", f"root={tmp_path}", "logger=[wandb,mlflow]"])
    assert config_fingerprint(plain) == config_fingerprint(tracked)
    assert dict(tracked.logger) and not dict(plain.logger)


def test_names_in_each_tool():
    row = {"encoding": "rope", "overrides": YARN, "mode": "sliding", "window": 16, "stride": 8}
    assert variant(row) == "rope+yarn×4 sliding w16 s8"
    assert metric_key("eval/rope+yarn×4/loss") == "eval/rope_yarnx4/loss"


@pytest.mark.slow
def test_wandb_offline_run_reads_back(tmp_path, monkeypatch, read_wandb):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg, run = setup(tmp_path, "logger=wandb")
    sweep = tmp_path / "sweeps" / "20250101-000000_abcdef"
    with open_trackers(cfg, run, NAMES, sweep_dir=sweep) as trackers:
        for row in train_rows():
            trackers.log_train(row)
        trackers.log_eval(eval_rows())
    (path,) = (run / "wandb").glob("offline-run-*/run-*.wandb")
    records = read_wandb(path)
    kinds = [r.WhichOneof("record_type") for r in records]
    (start,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert start.run_group == sweep.name and start.display_name == run.name
    config = {u.key: json.loads(u.value_json) for u in start.config.update}
    assert config["model"]["d_model"] == 64 and config["logger"] == {
        "wandb": config["logger"]["wandb"]
    }
    history = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
               for r in records if r.WhichOneof("record_type") == "history"]  # fmt: skip
    train = [h for h in history if "train/loss" in h]
    assert [h["_step"] for h in train] == [10, 20, 30]
    assert [h["train/grad_norm"] for h in train] == pytest.approx([0.1, 0.05, 1 / 30])
    evals = {h["eval/length"]: h["eval/rope/exact_match"] for h in history
             if "eval/rope/exact_match" in h}  # fmt: skip
    assert evals == {16: 0.25, 32: 0.0}
    assert not any("eval/length" in h for h in train)  # eval rows never join a training step
    table = [h for h in history if "eval/table/_type" in h]
    assert [(h["eval/table/_type"], h["eval/table/nrows"]) for h in table] == [("table-file", 3)]
    assert "exit" in kinds
    assert json.loads((run / "trackers.json").read_text())["wandb"]["id"] == start.run_id


@pytest.mark.slow
def test_mlflow_file_store_reads_back_with_its_client(tmp_path):
    pytest.importorskip("mlflow", reason="logger=mlflow needs the mlflow extra")
    from mlflow.tracking import MlflowClient

    store = tmp_path / "mlruns"
    sweep = tmp_path / "sweeps" / "20250101-000000_abcdef"
    runs = []
    for seed in (0, 1):
        cfg, run = setup(tmp_path / f"s{seed}", "logger=mlflow",
                         f"logger.mlflow.tracking_uri={store}", f"seed={seed}")  # fmt: skip
        runs.append(run)
        with open_trackers(cfg, run, NAMES, sweep_dir=sweep) as trackers:
            for row in train_rows():
                trackers.log_train(row)
            trackers.log_eval(eval_rows())
    assert os.environ.get("MLFLOW_ALLOW_FILE_STORE") == "true"
    client = MlflowClient(tracking_uri=store.as_uri())
    (experiment,) = [e for e in client.search_experiments() if e.name == "posx"]
    found = client.search_runs([experiment.experiment_id])
    parents = [r for r in found if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in found if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and parents[0].info.run_name == sweep.name
    assert len(children) == 2
    for child in children:
        assert child.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert child.info.status == "FINISHED" and child.data.params["model.d_model"] == "64"
        history = client.get_metric_history(child.info.run_id, "train/loss")
        assert [m.step for m in history] == [10, 20, 30]
        exact = client.get_metric_history(child.info.run_id, "eval/rope/exact_match")
        assert sorted((m.step, m.value) for m in exact) == [(16, 0.25), (32, 0.0)]


def test_list_shows_each_logger_with_its_extra(cli):
    assert cli("list", "logger").returncode == 0
    for name in ("tensorboard", "wandb", "mlflow"):
        out = cli("list", "logger", name)
        assert f"posx[{name}]" in out.stdout, name  # rich markup must not eat [name]


def test_posx_eval_warns_when_a_tracker_is_not_installed_here(tmp_path, monkeypatch):
    cfg, run = setup(tmp_path, "logger=wandb")
    monkeypatch.setattr(tracking, "installed", lambda package: False)
    assert log_eval_rows_for(run, cfg, eval_rows()) == [
        "eval rows not sent to wandb: logger=wandb needs the wandb package: "
        "pip install 'posx[wandb]'"
    ]


def test_a_tracker_that_fails_mid_run_is_dropped_with_a_warning(caplog):
    class Broken(tracking.Tracker):
        name = "broken"
        calls = 0

        def state(self):
            return {}

        def describe(self):
            return "broken"

        def log_train(self, row):
            raise OSError("disk full")

        def log_eval(self, rows):
            Broken.calls += 1

        def close(self, status):
            Broken.calls += 1

    trackers = tracking.Trackers([Broken()])
    with trackers:
        trackers.log_train(train_rows()[0])
        trackers.log_eval(eval_rows())
    assert Broken.calls == 0 and trackers.trackers == []
    assert "posx: warning: broken stopped logging: disk full" in caplog.text


def test_posx_imports_without_any_tracker_installed():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "for name in ('wandb', 'mlflow', 'tensorboard', 'torch.utils.tensorboard'):\n"
        "    sys.modules[name] = None  # as if not installed\n"
        "import posx.tracking.tensorboard, posx.tracking.wandb, posx.tracking.mlflow\n"
        "import posx.runs, posx.cli\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
