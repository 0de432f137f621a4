"""Shared fixtures: a tiny config that trains in seconds, and a CLI runner in a subprocess."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

TINY = [
    "task=copy",
    "model.d_model=32",
    "model.n_layers=1",
    "model.n_heads=4",
    "model.d_ff=64",
    "train.length=16",
    "train.steps=30",
    "train.batch_size=8",
    "train.warmup_steps=5",
    "train.log_every=10",
    "train.progress=false",
    "eval.lengths=[16,32]",
    "eval.tokens=256",
]


@pytest.fixture
def tiny_overrides(tmp_path: Path) -> list[str]:
    """Overrides for a ~2 s copy-task run whose results land in ``tmp_path``."""
    return [*TINY, f"root={tmp_path}"]


@pytest.fixture
def tiny_cfg(tmp_path: Path):
    """The composed config of the tiny run (no Hydra app, no files written)."""
    from posx.config import compose

    return compose([*TINY, f"root={tmp_path}"])


def run_posx(
    *args: str, cwd: Path | None = None, check: bool = False
) -> subprocess.CompletedProcess:
    """Runs ``python -m posx ARGS`` as a user would; returns the finished process."""
    env = {**os.environ, "POSX_DEBUG": "0", "HYDRA_FULL_ERROR": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "posx", *args],
        cwd=cwd or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"posx {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


@pytest.fixture
def posx():
    return run_posx


class CliResult:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def cli(capsys, monkeypatch):
    """Runs ``posx ARGS`` in this process (fast; for paths that fail before training)."""
    from posx.cli import main

    def run(*args: str) -> CliResult:
        monkeypatch.setattr(sys, "argv", ["posx", *args])
        monkeypatch.setenv("POSX_DEBUG", "0")
        capsys.readouterr()
        try:
            main()
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        out = capsys.readouterr()
        return CliResult(code, out.out, out.err)

    return run


def markdown_blocks(path: Path, section: str | None = None) -> list[tuple[str, str]]:
    """The fenced code blocks of a Markdown file as ``(info string, code)``, optionally only those
    under the ``## section`` heading (up to the next ``## ``): documentation a test executes."""
    text = path.read_text()
    if section is not None:
        start = text.index(f"\n## {section}\n")
        end = text.find("\n## ", start + 1)
        text = text[start : end if end != -1 else len(text)]
    fences = re.finditer(r"^```([^\n]*)\n(.*?)^```$", text, re.M | re.S)
    return [(m[1].strip(), m[2]) for m in fences]


@pytest.fixture
def doc_blocks():
    return markdown_blocks
