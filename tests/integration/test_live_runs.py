"""A run still training is left to its process (issue 48): ``posx extend RUN`` and ``posx resume
RUN`` say it is still training and to wait or stop it, instead of starting a second process on
it; a run whose process died is finished with ``posx resume``."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from posx.runtime.distributed import World
from posx.saved.process import _start_time, this_process
from posx.training.record import RunRecord


@pytest.fixture
def other_process() -> Iterator[subprocess.Popen]:
    """A live process of this machine, standing for one that trains a run."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def _training(run: Path, pid: int, start: str | None, host: str | None = None) -> dict:
    """Makes ``run``'s run.json say it is training in process ``pid``; returns the record."""
    info = json.loads((run / "run.json").read_text())
    process = {"host": host or socket.gethostname(), "pid": pid, "start": start}
    (run / "run.json").write_text(json.dumps({**info, "status": "training", "process": process}))
    return json.loads((run / "run.json").read_text())


def test_extend_of_a_run_still_training_says_to_wait_or_stop_it(cli, copy_run, other_process):
    run = copy_run()
    _training(run, other_process.pid, _start_time(other_process.pid))
    result = cli("extend", str(run), "extension=yarn")
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert f"is still training (process {other_process.pid} on this machine)" in line
    assert "wait for it to finish, or stop it first" in line
    assert "posx resume" not in line  # a second process on a live run
    assert not (run.parent / "extensions").exists() and len(list(run.parent.iterdir())) == 1


def test_extend_of_a_run_whose_process_died_says_to_resume_it(cli, copy_run):
    run = copy_run()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _training(run, dead.pid, "1")
    result = cli("extend", str(run), "extension=yarn")
    assert result.returncode == 2, result.stderr
    assert "stopped while training (its process is gone)" in result.stderr
    assert f"`posx resume {run}`" in result.stderr


def test_a_process_id_taken_by_another_process_is_not_the_training_one(
    cli, copy_run, other_process
):
    """The id is alive, but its process started at another time: the trainer died and its id
    was given to a new process."""
    if _start_time(other_process.pid) is None:
        pytest.skip("no /proc: start times are not known here")
    run = copy_run()
    _training(run, other_process.pid, "1")
    result = cli("extend", str(run), "extension=yarn")
    assert result.returncode == 2 and "stopped while training" in result.stderr, result.stderr


def test_a_run_training_on_another_machine_is_taken_at_its_word(cli, copy_run):
    run = copy_run()
    _training(run, 4242, "1", host="node-17")
    result = cli("extend", str(run), "extension=yarn")
    assert result.returncode == 2, result.stderr
    assert "is still training (process 4242 on node-17, by its run.json)" in result.stderr


def test_resume_of_a_run_still_training_is_refused(cli, copy_run, other_process):
    run = copy_run()
    before = _training(run, other_process.pid, _start_time(other_process.pid))
    result = cli("resume", str(run))
    assert result.returncode == 2, result.stderr
    assert f"is still training (process {other_process.pid} on this machine)" in result.stderr
    assert json.loads((run / "run.json").read_text()) == before


def test_training_records_its_process(tmp_path):
    RunRecord(tmp_path, {"run": "r"}, World()).training(None)
    info = json.loads((tmp_path / "run.json").read_text())
    assert info["status"] == "training" and info["process"] == this_process()
    assert info["process"]["pid"] > 0
