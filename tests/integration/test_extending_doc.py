"""docs/extending.md, followed literally in an empty directory: its code blocks are this test's
input (files to save, shell lines to run), so the tutorial cannot drift from what posx does.

Every fenced block of the page is one of: a file to save (```` ```python file=PATH ````), shell
lines this test runs (```` ```bash ````: the tutorial's steps; ```` ```bash try ````: the
try-outs of "More", run after them), or a block the page marks as not run with an HTML comment
on the line before its fence (``<!-- not run: WHY -->``), which readers of the source see. A
``posx`` command written inline with overrides must also be on a line of a shell block, so a
recipe cannot hide in prose (issue 35: §5's one did not work, and no test ran it).

The shell lines run in this process (``cd``, ``export`` and ``posx ...`` are all the tutorial
uses); tests/integration/test_wheel.py runs the ```` ```bash ```` lines in real bash against an
installed wheel."""

from __future__ import annotations

import os
import re
import shlex
import textwrap
from pathlib import Path

import pandas as pd
import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "extending.md"
pytestmark = pytest.mark.slow  # trains, evaluates and reports in process: 10-25 s on 2 busy cores

SHELL = ("bash", "bash try")  # blocks this test runs, in this order of kinds
NOT_RUN = re.compile(r"<!-- not run: [^>]+ -->\n *```([^\n]*)\n")
# fenced blocks, indented ones (inside a list item) included
FENCE = re.compile(r"^( *)```([^\n]*)\n(.*?)^\1```$", re.M | re.S)
# an inline `posx SUBCOMMAND ...` with an override (key=value): a command a reader would run
INLINE_COMMAND = re.compile(r"`(posx [a-z]+ [^`]*=[^`]*)`")


def page_blocks() -> list[tuple[str, str]]:
    """Every fenced block of the page as ``(info string, code)``, in page order; a block
    indented into a list item is dedented (``conftest.markdown_blocks`` sees unindented ones)."""
    return [(m[2].strip(), textwrap.dedent(m[3])) for m in FENCE.finditer(DOC.read_text())]


def save_files(blocks: list[tuple[str, str]], root: Path) -> list[Path]:
    """Writes every block whose info string names a ``file=``; the page's prose must name the
    same path just before the block, so what readers see is what the test saves."""
    text, saved = DOC.read_text(), []
    for info, code in blocks:
        words = dict(w.split("=", 1) for w in info.split()[1:] if "=" in w)
        if "file" in words:
            fence = text.index(f"```{info}\n")  # file blocks are never indented
            assert f"`{words['file']}`" in text[max(0, fence - 200) : fence], words["file"]
            (root / words["file"]).parent.mkdir(parents=True, exist_ok=True)
            (root / words["file"]).write_text(code)
            saved.append(root / words["file"])
    return saved


def shell_lines(blocks: list[tuple[str, str]]) -> list[list[str]]:
    """The words of each command of the shell blocks (continuation lines joined): the
    tutorial's ``bash`` blocks, then its ``bash try`` ones."""
    ordered = [code for kind in SHELL for info, code in blocks if info == kind]
    script = "\n".join(ordered).replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in script.splitlines() if line.strip()]


def test_every_block_of_the_page_is_saved_run_or_marked_not_run():
    marked = [m.strip() for m in NOT_RUN.findall(DOC.read_text())]
    assert not set(marked) & set(SHELL), f"a block marked not run would be run: {marked}"
    rest = [info for info, _ in page_blocks() if "file=" not in info and info not in SHELL]
    assert sorted(rest) == sorted(marked), f"blocks neither run nor marked not run: {rest}"


def test_inline_commands_are_in_a_shell_block():
    shell = "\n".join(code for _, code in page_blocks()).replace("\\\n", " ")
    shell = re.sub(r"[ \t]+", " ", shell)
    prose = re.sub(r"\s+", " ", re.sub(r"^```.*?^```$", "", DOC.read_text(), flags=re.M | re.S))
    hidden = [c for c in INLINE_COMMAND.findall(prose) if c not in shell]
    assert not hidden, f"inline commands no block runs (put them in a ```bash block): {hidden}"


def follow(cli, blocks: list[tuple[str, str]], monkeypatch) -> dict[str, list[str]]:
    """Runs the page's shell lines; returns each posx subcommand's outputs, in order."""
    out: dict[str, list[str]] = {}
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
            out.setdefault(words[1], []).append(result.stdout)
        else:
            raise AssertionError(f"the test cannot follow this tutorial line: {words}")
    return out


def test_the_extending_tutorial_works_as_written(cli, tmp_path, monkeypatch):
    from posx import cli as cli_module

    monkeypatch.setattr(cli_module.console, "width", 240)  # table rows on one line each
    for var in ("POSX_CONFIG_PATH", "POSX_CONFIG_DIR"):
        monkeypatch.delenv(var, raising=False)
    blocks = page_blocks()
    assert len(save_files(blocks, tmp_path)) == 5
    assert any(info == "bash try" for info, _ in blocks)  # "More" is run too
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PWD", str(tmp_path))
    out = follow(cli, blocks, monkeypatch)

    project = tmp_path / "myproject"
    mine = [line for line in out["list"][0].splitlines() if " log_bias " in line]
    assert len(mine) == 1 and "(mypkg)" in mine[0] and str(project / "conf") in mine[0], mine
    assert " rope " in out["list"][0]  # beside the built-in ones
    runs = {p.name.split("_s0_")[0]: p for p in (project / "results" / "runs").iterdir()}
    # §4's run, then §5's class without a yaml (labelled by its class) and the named variant
    assert set(runs) == {
        "recall_first_log_bias_L16",
        "recall_first_LogBias_L16",
        "recall_first_log_bias_x2_L16",
    }, sorted(runs)
    rows = pd.read_csv(runs["recall_first_log_bias_L16"] / "eval.csv")
    assert sorted(rows["eval_length"]) == [16, 32, 64] and set(rows["encoding"]) == {"log_bias"}
    assert rows["exact_match"].between(0, 1).all()
    assert "log_bias" in out["report"][0] and "recall_first" in out["report"][0]
    for name, label in [("LogBias", "LogBias"), ("log_bias_x2", "log_bias_x2")]:
        more = pd.read_csv(runs[f"recall_first_{name}_L16"] / "eval.csv")
        assert set(more["encoding"]) == {label} and set(more["status"]) == {"ok"}
