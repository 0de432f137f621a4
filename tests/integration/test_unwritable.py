"""Every place a command writes is checked before the work starts: one line, exit 2, nothing
changed (issue 20, section 4)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def error_line(result) -> str:
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("posx: error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """Makes ``folder`` unwritable: ``chattr +i`` as root (permission bits do not stop root),
    else ``chmod 555``; skips the test where neither works."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        mode = folder.stat().st_mode
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(mode)
        return
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(folder)]).returncode != 0:
        pytest.skip("cannot make a directory unwritable here (root without chattr +i)")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", str(folder)], check=True)


def test_eval_into_an_unwritable_run_fails_before_evaluating(cli, copy_run):
    run = copy_run()
    before = snapshot(run)
    with read_only(run):
        result = cli("eval", str(run), "--lengths", "16,24", "--no-progress")
    line = error_line(result)
    assert result.returncode == 2 and f"run directory is not writable: {run}" in line, line
    assert "L=16" not in result.stdout  # nothing was evaluated
    assert snapshot(run) == before


def test_eval_with_an_unwritable_cache_fails_before_evaluating(cli, copy_run, tmp_path):
    run = copy_run()
    before = snapshot(run)
    with read_only(tmp_path / ".eval_cache"):
        result = cli("eval", str(run), "--lengths", "16,24", "--no-progress")
    line = error_line(result)
    assert result.returncode == 2 and "eval cache is not writable" in line, line
    assert snapshot(run) == before


def test_resume_of_an_unwritable_run_fails_before_training(cli, copy_run):
    run = copy_run()
    before = snapshot(run)
    with read_only(run):
        result = cli("resume", str(run))
    line = error_line(result)
    assert result.returncode == 2 and f"run directory is not writable: {run}" in line, line
    assert snapshot(run) == before


def test_report_output_in_an_unwritable_directory(cli, copy_run, tmp_path):
    copy_run()
    with read_only(tmp_path / "out"):
        result = cli("report", "--root", str(tmp_path / "runs"), "-o", str(tmp_path / "out/t.md"))
    line = error_line(result)
    assert result.returncode == 2 and "-o directory is not writable" in line, line


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--plot", "{f}"], "--plot directory {f} cannot be created: {f} is not a directory"),
        (["-o", "{f}/t.md"], "-o directory {f} cannot be created: {f} is not a directory"),
        (["-o", "{d}"], "-o {d} is a directory; give a file name"),
    ],
    ids=["--plot an existing file", "-o below a file", "-o a directory"],
)
def test_report_output_that_cannot_be_a_file_or_directory(cli, copy_run, tmp_path, args, text):
    copy_run()
    afile, adir = tmp_path / "afile", tmp_path / "adir"
    afile.write_text("keep\n")
    adir.mkdir()
    result = cli(
        "report", "--root", str(tmp_path / "runs"), *(a.format(f=afile, d=adir) for a in args)
    )
    line = error_line(result)
    assert result.returncode == 2 and text.format(f=afile, d=adir) in line, line
    assert afile.read_text() == "keep\n" and not list(adir.iterdir())
