"""Pretrained runs with experiment trackers (``posx eval hf:X logger=...``) and as a Hydra sweep
(``posx eval -m hf=A,B ...``), as a user types them; ``posx runs`` shows them as pretrained."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from posx import tracking
from posx.tracking.base import Tracker
from tests.integration.test_cli_errors import assert_one_line_error
from tests.unit.pretrained.tiny_models import model_root, offline_hub

SMALL = ["task.val_fraction=0.5", "eval.tokens=128", "--lengths", "32,64"]


class FakeTracker(Tracker):
    """A tracker that appends what it is sent to ``<run dir>/fake.jsonl`` (``logger=fake``)."""

    name = "fake"

    def __init__(self, settings, run, state):
        self.path = run.run_dir / "fake.jsonl"
        self.id = state.get("id") or f"fake-{run.name}"
        self._write(opened=self.id, reopened=bool(state), group=run.group,
                    note=settings.get("note"), encoding=run.tags["encoding"])  # fmt: skip

    def _write(self, **record):
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")

    def state(self):
        return {"id": self.id}

    def describe(self):
        return f"fake: {self.path}"

    def log_train(self, row):
        raise AssertionError("a pretrained run has no training curve")

    def log_eval(self, rows):
        self._write(lengths=[r["eval_length"] for r in rows],
                    overrides=sorted({r["overrides"] for r in rows}))  # fmt: skip

    def close(self, status):
        self._write(closed=status)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    import torch

    torch.set_num_threads(1)
    return model_root(tmp_path_factory.mktemp("hf_sweep"), ("llama", "qwen2"))


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    offline_hub(monkeypatch, tmp_path / "hf_home")


@pytest.fixture
def fake_logger(monkeypatch, tmp_path) -> Path:
    """``logger=fake``: a config dir with ``logger/fake.yaml``; the tracker is this module's."""
    monkeypatch.setitem(tracking.LOGGERS, "fake", ("json", __name__, "FakeTracker"))
    configs = tmp_path / "configs"
    (configs / "logger").mkdir(parents=True)
    (configs / "logger" / "fake.yaml").write_text("fake:\n  note: hello\n")
    return configs


def records(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "fake.jsonl").read_text().splitlines()]


def test_trackers_follow_a_pretrained_run_and_runs_shows_it(cli, models, fake_logger, tmp_path):
    root = tmp_path / "results"
    corpus = f"task.corpus={models / 'corpus.txt'}"
    first = cli("--config-dir", str(fake_logger), "eval", f"hf:{models / 'llama'}", "--root",
                str(root), corpus, *SMALL, "--no-progress", "logger=fake")  # fmt: skip
    assert first.returncode == 0, first.stderr
    (run,) = (root / "pretrained").iterdir()
    assert json.loads((run / "trackers.json").read_text()) == {"fake": {"id": f"fake-{run.name}"}}
    assert json.loads((run / "run.json").read_text())["logger"] == {"fake": {"note": "hello"}}
    # later, without logger=: the rows go to the same tracker run, reopened from trackers.json
    again = cli("--config-dir", str(fake_logger), "eval", f"hf:{models / 'llama'}", "--root",
                str(root), corpus, *SMALL, "--variant", "yarn:2", "--no-progress")  # fmt: skip
    assert again.returncode == 0, again.stderr
    yarn = "encoding.scaling.factor=2.0 encoding.scaling.type=yarn"
    assert records(run) == [
        {"opened": f"fake-{run.name}", "reopened": False, "group": None, "note": "hello",
         "encoding": "llama"},
        {"lengths": [32, 64], "overrides": [""]},
        {"closed": "finished"},
        {"opened": f"fake-{run.name}", "reopened": True, "group": None, "note": "hello",
         "encoding": "llama"},
        {"lengths": [32, 64], "overrides": [yarn]},
        {"closed": "finished"},
    ]  # fmt: skip

    table = cli("runs", "--root", str(root))
    assert table.returncode == 0, table.stderr
    head, line = table.stdout.splitlines()
    steps = head.index("steps")
    assert line[steps:].split()[0] == "pretrained", table.stdout
    listed = json.loads(cli("runs", "--root", str(root), "--format", "json").stdout)
    assert [(r["steps_done"], r["steps_total"]) for r in listed] == [(None, None)]


def test_a_logger_that_is_not_installed_is_one_line_before_loading(cli, models, tmp_path,
                                                                  monkeypatch):  # fmt: skip
    monkeypatch.setattr(tracking, "installed", lambda package: False)
    root = tmp_path / "results"
    out = cli("eval", f"hf:{models / 'llama'}", "--root", str(root), *SMALL, "logger=wandb")
    assert_one_line_error(out, 2, "logger=wandb needs the wandb package: pip install 'posx[wandb]'")
    assert not root.exists()


def test_tensorboard_gets_a_pretrained_runs_rows_across_evaluations(cli, models, tmp_path):
    pytest.importorskip("tensorboard", reason="logger=tensorboard needs the tensorboard extra")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root = tmp_path / "results"
    args = ["--root", str(root), f"task.corpus={models / 'corpus.txt'}", "--no-progress"]
    first = cli("eval", f"hf:{models / 'llama'}", *args, *SMALL, "logger=tensorboard")
    assert first.returncode == 0, first.stderr
    longer = ["task.val_fraction=0.5", "eval.tokens=128", "--lengths", "128"]
    assert cli("eval", f"hf:{models / 'llama'}", *args, *longer).returncode == 0
    (run,) = (root / "pretrained").iterdir()
    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("eval/llama/bpb")] == [32, 64, 128]


def test_a_sweep_over_two_models_goes_on_past_a_failing_one(cli, models, fake_logger, tmp_path):
    root = tmp_path / "results"
    paths = ",".join(f"'{models / m}'" for m in ("llama", "missing", "qwen2"))
    out = cli("--config-dir", str(fake_logger), "eval", "-m", f"hf={paths}",
              f"root={root}", f"task.corpus={models / 'corpus.txt'}", *SMALL,
              "logger=fake")  # fmt: skip
    assert out.returncode == 1, out.stderr
    (sweep,) = (root / "sweeps").iterdir()
    assert f"sweep done: 3 job(s), 1 failed in {sweep}" in out.stdout
    assert out.stderr.strip().splitlines()[-1] == (
        f"posx: error: 1 pretrained evaluation(s) failed: hf:{models / 'missing'} "
        f"({models / 'missing'} is not a directory holding a saved model)"
    )
    runs = sorted((root / "pretrained").iterdir())
    assert [r.name.split("_")[0] for r in runs] == ["llama", "qwen2"]
    for run in runs:
        rows = pd.read_csv(run / "eval.csv", keep_default_na=False)
        assert sorted(rows["eval_length"]) == [32, 64] and set(rows["status"]) == {"ok"}
        assert records(run)[0]["group"] == sweep.name  # the trackers group the sweep's runs
    jobs = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/job.json"))]
    assert [j["status"] for j in jobs] == ["finished", "failed", "finished"]
    status = cli("sweep", "status", str(sweep))
    assert "2 finished, 1 failed of 3 jobs" in " ".join(status.stdout.split()), status.stdout
    # the sweep's runs are ordinary pretrained runs: one report table holds both models
    report = cli("report", "--root", str(root), "--format", "json", "--task", "text")
    cells = pd.DataFrame(json.loads(report.stdout)["cells"])
    assert set(cells["variant"]) == {"llama", "qwen2"}


def test_a_bad_sweep_setting_is_one_line_before_any_job(cli, models, tmp_path):
    root = tmp_path / "results"
    out = cli("eval", "-m", f"hf:{models / 'llama'}", f"hf:{models / 'qwen2'}", f"root={root}",
              "--lengths", "32", "--mode", "diagonal")  # fmt: skip
    assert_one_line_error(out, 2, "unknown eval.mode 'diagonal'; choose from full, sliding")
    assert not (root / "pretrained").exists()
    out = cli("eval", "-m", f"root={root}", "eval.tokens=64")
    assert_one_line_error(out, 2, "name the models to evaluate: posx eval -m hf=NAME_A,NAME_B ...")


def test_an_hf_word_is_explained_as_a_pretrained_model():
    from posx.runs.targets import explain_run_argument

    text = explain_run_argument("hf:gpt2")
    assert "not supported" not in text and "posx eval hf:NAME_OR_DIR" in text, text
