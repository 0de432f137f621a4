"""docs/extending.md, followed literally in an empty directory: its code blocks are this test's
input (files to save, shell lines to run), so the tutorial cannot drift from what posx does.

The shell lines run in this process (``cd``, ``export`` and ``posx ...`` are all the tutorial
uses); tests/integration/test_wheel.py runs the same lines in real bash against an installed
wheel."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pandas as pd
import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "extending.md"
pytestmark = pytest.mark.slow  # trains, evaluates and reports in process: 5-15 s on 2 busy cores


def save_files(blocks: list[tuple[str, str]], root: Path) -> list[Path]:
    """Writes every block whose info string names a ``file=``; the page's prose must name the
    same path just before the block, so what readers see is what the test saves."""
    text, saved = DOC.read_text(), []
    for info, code in blocks:
        words = dict(w.split("=", 1) for w in info.split()[1:] if "=" in w)
        if "file" in words:
            fence = text.index(f"```{info}\n")
            assert f"`{words['file']}`" in text[max(0, fence - 200) : fence], words["file"]
            (root / words["file"]).parent.mkdir(parents=True, exist_ok=True)
            (root / words["file"]).write_text(code)
            saved.append(root / words["file"])
    return saved


def shell_lines(blocks: list[tuple[str, str]]) -> list[list[str]]:
    """The words of each command of the ``bash`` blocks (continuation lines joined)."""
    script = "\n".join(code for info, code in blocks if info == "bash").replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in script.splitlines() if line.strip()]


def test_the_extending_tutorial_works_as_written(cli, doc_blocks, tmp_path, monkeypatch):
    from posx import cli as cli_module

    monkeypatch.setattr(cli_module.console, "width", 240)  # table rows on one line each
    for var in ("POSX_CONFIG_PATH", "POSX_CONFIG_DIR"):
        monkeypatch.delenv(var, raising=False)
    blocks = doc_blocks(DOC)
    assert len(save_files(blocks, tmp_path)) == 5
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PWD", str(tmp_path))
    out: dict[str, str] = {}
    for words in shell_lines(blocks):
        if words[0] == "cd":
            monkeypatch.chdir(words[1])
            monkeypatch.setenv("PWD", str(Path.cwd()))
        elif words[0] == "export":
            key, value = os.path.expandvars(words[1]).split("=", 1)
            monkeypatch.setenv(key, value)
            if key == "PYTHONPATH":  # what a new `posx` process would get from it
                for entry in value.split(os.pathsep):
                    monkeypatch.syspath_prepend(entry)
        elif words[0] == "posx":
            result = cli(*words[1:])
            assert result.returncode == 0, (words, result.stderr)
            out[words[1]] = result.stdout
        else:
            raise AssertionError(f"the test cannot follow this tutorial line: {words}")

    project = tmp_path / "myproject"
    mine = [line for line in out["list"].splitlines() if " log_bias " in line]
    assert len(mine) == 1 and "(mypkg)" in mine[0] and str(project / "conf") in mine[0], mine
    assert " rope " in out["list"]  # beside the built-in ones
    (run,) = (project / "results" / "runs").iterdir()
    assert run.name.startswith("recall_first_log_bias_L16_s0_"), run.name
    rows = pd.read_csv(run / "eval.csv")
    assert sorted(rows["eval_length"]) == [16, 32, 64] and set(rows["encoding"]) == {"log_bias"}
    assert rows["exact_match"].between(0, 1).all()
    assert "log_bias" in out["report"] and "recall_first" in out["report"]
