"""Memory and lengths are checked before anything is allocated (issue 20, section 3): a step or
an eval length that cannot fit is refused in one line giving the estimate; lengths past int64
are refused outright."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest

import posx.runs.resources

GIB = 2**30


@pytest.fixture
def twelve_gib(monkeypatch):
    """A machine with 12 GiB available (the issue's limit), whatever this one has."""
    monkeypatch.setattr(
        posx.runs.resources, "available_bytes", lambda device: (12 * GIB, "the 12.0 GiB available")
    )


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def error_line(result) -> str:
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("posx: error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["encoding=learned", "train.length=1000000000"], "a training step (batch 8 x length"),
        (["task=copy", "train.length=1000000000"], "a training step (batch 8 x length"),
        (["eval.lengths=[16,100000000]"], "evaluating after training at length 100000000"),
        (["encoding=shaw", "train.length=200000"], "a training step (batch 8 x length 200000)"),
    ],
    ids=["learned table", "copy batch", "eval after training", "quadratic attention"],
)
def test_training_that_cannot_fit_is_refused_before_allocating(
    cli, tiny_overrides, tmp_path, twelve_gib, args, text
):
    before = peak_rss()
    result = cli("train", *tiny_overrides, *args)
    line = error_line(result)
    assert result.returncode == 2 and text in line, line
    assert "needs about" in line and "more than the 12.0 GiB available" in line, line
    assert peak_rss() - before < GIB // 2  # nothing big was allocated on the way
    assert not (tmp_path / "runs").exists()


def test_explicit_train_memory_limit(cli, tiny_overrides, tmp_path):
    result = cli("train", *tiny_overrides, "train.max_memory=1M")
    line = error_line(result)
    assert result.returncode == 2 and "more than the limit of 1.0 MiB you set" in line, line
    assert "train.max_memory=SIZE" in line
    result = cli("train", *tiny_overrides, "train.max_memory=lots")
    assert result.returncode == 2 and "train.max_memory must be a size" in error_line(result)


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--lengths", "100000000"], "at length 100000000 needs about"),
        (["--lengths", "16", "--max-memory", "1M"], "more than the limit of 1.0 MiB you set"),
        (["--lengths", "99999999999999999999999"], "must be at most 9223372036854775807 (int64)"),
        (["--max-memory", "x"], "--max-memory must be a size such as 8G"),
    ],
    ids=["too long", "explicit limit", "past int64", "bad size"],
)
def test_eval_that_cannot_fit_is_refused_before_any_row(cli, copy_run, twelve_gib, args, text):
    run = copy_run()
    before, table = peak_rss(), (run / "eval.csv").read_bytes()
    result = cli("eval", str(run), "--no-progress", *args)
    line = error_line(result)
    assert result.returncode == 2 and text in line, line
    assert (run / "eval.csv").read_bytes() == table
    assert peak_rss() - before < GIB // 2


def test_train_length_past_int64_is_refused(cli, tiny_overrides, tmp_path: Path):
    result = cli("train", *tiny_overrides, "train.length=99999999999999999999999")
    line = error_line(result)
    assert result.returncode == 2 and "train.length must be at most 9223372036854775807" in line
