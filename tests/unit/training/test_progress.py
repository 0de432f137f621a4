"""Training progress: a live bar on a terminal, plain periodic lines otherwise, all in the log."""

from __future__ import annotations

import logging
import math

import pytest

from posx.logs import StderrFilter, StdoutFilter
from posx.runs.messages import eval_table
from posx.training import progress as progress_module
from posx.training.progress import TrainProgress, duration, progress_line

ROW = {"loss": 2.5, "lr": 3e-3, "tokens_per_s": 1234.5, "grad_norm": 0.51, "seconds": 75.0}


def lines(caplog, on_terminal: bool, monkeypatch, every: float, steps=(10, 20, 30)):
    monkeypatch.setattr(progress_module, "stdout_is_terminal", lambda: on_terminal)
    caplog.set_level(logging.INFO, logger="posx")
    with TrainProgress(30, 0, True, every) as bar:
        for step in steps:
            bar.update(step, ROW)
    return [r for r in caplog.records if r.name == "posx.train"]


def test_piped_stdout_gets_plain_lines(caplog, monkeypatch):
    records = lines(caplog, False, monkeypatch, every=0)
    assert [r.getMessage().split(" (")[0] for r in records] == [
        "step 10/30", "step 20/30", "step 30/30"
    ]  # fmt: skip
    assert all(getattr(r, "console", True) for r in records)  # printed, not only in the file


def test_on_a_terminal_lines_go_to_the_log_file_only(caplog, monkeypatch):
    records = lines(caplog, True, monkeypatch, every=0)
    assert len(records) == 3 and not any(r.console for r in records)
    assert not StdoutFilter().filter(records[0])  # the bar shows it; the file keeps it


def test_lines_are_periodic_first_and_last_always(caplog, monkeypatch):
    records = lines(caplog, False, monkeypatch, every=3600, steps=range(10, 31, 2))
    assert [r.getMessage().split(" (")[0] for r in records] == ["step 10/30", "step 30/30"]


BASIC = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
JOBLIB = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"


@pytest.fixture
def hydra_job(tmp_path):
    """``hydra_job(mode, launcher)``: makes this process a Hydra job of a run or a multirun,
    in the run directory ``copy_nope_L16_s0_1``, as Hydra does before calling posx's job."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from posx.config.compose import compose

    def set_job(mode: str, launcher: str = BASIC) -> None:
        cfg = compose([f"root={tmp_path}"], hydra_node=True)
        OmegaConf.set_readonly(cfg.hydra, False)
        cfg.hydra.mode = RunMode[mode]
        cfg.hydra.launcher._target_ = launcher
        cfg.hydra.runtime.output_dir = str(tmp_path / "sweeps" / "x" / "copy_nope_L16_s0_1")
        HydraConfig.instance().set_config(cfg)

    yield set_job
    HydraConfig.instance().cfg = None


@pytest.mark.parametrize("launcher", [JOBLIB, BASIC])
def test_a_sweep_job_names_its_run_on_every_line(caplog, monkeypatch, hydra_job, launcher):
    """Issue 35, item 8: jobs of a parallel sweep interleave their lines on one terminal."""
    hydra_job("MULTIRUN", launcher)
    records = lines(caplog, False, monkeypatch, every=0)
    assert [r.getMessage().split(" (")[0] for r in records] == [
        "[copy_nope_L16_s0_1] step 10/30", "[copy_nope_L16_s0_1] step 20/30",
        "[copy_nope_L16_s0_1] step 30/30",
    ]  # fmt: skip


def test_parallel_jobs_print_lines_not_bars_on_a_terminal(caplog, monkeypatch, hydra_job):
    """Two live bars in one terminal overwrite each other's line: parallel jobs print lines."""
    hydra_job("MULTIRUN", JOBLIB)
    records = lines(caplog, True, monkeypatch, every=0)
    assert len(records) == 3 and all(r.console for r in records)


def test_sequential_sweep_and_single_run_keep_the_bar(caplog, monkeypatch, hydra_job):
    hydra_job("MULTIRUN", BASIC)  # Hydra's basic launcher runs one job at a time
    assert not any(r.console for r in lines(caplog, True, monkeypatch, every=0))
    caplog.clear()
    hydra_job("RUN")
    records = lines(caplog, False, monkeypatch, every=0)
    assert records[0].getMessage().startswith("step 10/30")  # one run: its name is above


def test_progress_line_and_durations():
    line = progress_line(20, 100, ROW, eta=65)
    assert (
        line == "step  20/100 ( 20%)  loss 2.5000  lr 3.00e-03  grad 0.51  1,234 tok/s  eta 1m05s"
    )
    assert progress_line(100, 100, ROW, eta=0).endswith("took 1m15s")
    assert "grad" not in progress_line(1, 2, {**ROW, "grad_norm": math.nan}, 1)
    assert [duration(x) for x in (5, 125, 7300, math.nan)] == ["5s", "2m05s", "2h01m", "?"]


def test_console_filters_split_stdout_and_stderr():
    def record(level, **extra):
        r = logging.LogRecord("posx", level, __file__, 1, "m", (), None)
        r.__dict__.update(extra)
        return r

    assert StdoutFilter().filter(record(logging.INFO))
    assert not StdoutFilter().filter(record(logging.ERROR))
    assert StderrFilter().filter(record(logging.ERROR))
    assert not StdoutFilter().filter(record(logging.INFO, console=False))


@pytest.mark.parametrize("metric", ["bpb", "exact_match"])
def test_eval_table(metric):
    rows = [
        {"eval_length": 64, "mode": "full", "status": "ok", metric: 0.5, "loss": 1.0},
        {"eval_length": 128, "mode": "full", "status": "ok", metric: 0.75, "loss": 1.5},
        {"eval_length": 1024, "mode": "full", "status": "unsupported", "reason": "too long"},
    ]
    got = eval_table(rows, 64)
    assert got[0].startswith(f"eval: {'bits per byte' if metric == 'bpb' else 'exact match'} [")
    assert got[0].endswith("×r = relative to L=64")
    assert got[1:] == [
        "  L=64    0.5000",
        "  L=128   0.7500  ×1.50",
        "  L=1024  unsupported: too long",
    ]


def test_eval_table_takes_the_training_length_from_earlier_rows():
    """`posx eval RUN --lengths 256,512` printed no ×r: the value at the training length was
    in eval.csv, not in the new rows."""
    new = [
        {"eval_length": 256, "mode": "full", "status": "ok", "bpb": 3.0, "overrides": ""},
        {"eval_length": 512, "mode": "full", "status": "ok", "bpb": 4.0, "overrides": ""},
    ]
    earlier = [
        {"eval_length": 64, "mode": "full", "status": "ok", "bpb": 9.0, "overrides": "x=1"},
        {"eval_length": 64, "mode": "sliding", "status": "ok", "bpb": 8.0, "overrides": ""},
        {"eval_length": 64, "mode": "full", "status": "ok", "bpb": 2.0, "overrides": ""},
    ]
    got = eval_table(new, 64, earlier)
    assert got[0].endswith("×r = relative to L=64")
    assert got[1:] == ["  L=256  3.0000  ×1.50", "  L=512  4.0000  ×2.00"]
    assert not any("×" in line for line in eval_table(new, 64)[1:])  # nothing to divide by


def test_a_sweep_job_names_its_run_in_the_other_lines_it_logs_too(caplog, hydra_job):
    """Besides the step lines, "training N steps" and "evaluating at" interleave too."""
    import logging

    import torch

    from posx.training.loop import _announce
    from posx.training.progress import tagged

    hydra_job("MULTIRUN", JOBLIB)
    with caplog.at_level(logging.INFO):
        _announce(0, 30, torch.device("cpu"))
    assert [r.getMessage() for r in caplog.records] == [
        "[copy_nope_L16_s0_1] training 30 steps on cpu"
    ]
    assert tagged("evaluating at L=16") == "[copy_nope_L16_s0_1] evaluating at L=16"
