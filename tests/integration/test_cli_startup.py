"""Commands that build no model answer without importing torch (issue 48: 'answers at once').

Each command runs in a fresh interpreter, through ``posx.cli.main`` as ``python -m posx`` runs
it, and reports which heavy modules it imported: importing torch alone takes longer than the
whole answer should.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

_PROBE = (
    "import json, sys\n"
    "from posx.cli import main\n"
    "sys.argv = ['posx', *json.loads(sys.argv[1])]\n"
    "try:\n"
    "    main()\n"
    "    code = 0\n"
    "except SystemExit as exit_:\n"
    "    code = exit_.code if isinstance(exit_.code, int) else 1\n"
    "heavy = sorted({'torch', 'transformers', 'matplotlib', 'pandas'} & set(sys.modules))\n"
    "sys.__stderr__.write('\\nPROBE ' + json.dumps({'code': code, 'heavy': heavy}) + '\\n')\n"
)


def _imports(*args: str) -> dict:
    """Runs ``posx ARGS`` in a fresh interpreter; its exit code and the heavy modules it
    imported."""
    env = {**os.environ, "POSX_DEBUG": "0", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(list(args))],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    probe = [line for line in proc.stderr.splitlines() if line.startswith("PROBE ")]
    assert probe, proc.stderr
    return {**json.loads(probe[-1][len("PROBE ") :]), "out": proc.stdout}


@pytest.mark.parametrize(
    "args",
    [
        ("train", "encodng=rope"),
        ("train", "encoding=ropee"),
        ("runs", "--bogus"),
        ("report", "--metrc", "loss"),
        ("list",),
        ("list", "encoding"),
        ("show-config", "encoding=rope"),
        ("eval", "--mode", "diagonal"),
    ],
)
def test_answers_without_torch(args: tuple[str, ...]) -> None:
    """A mistyped option or override, and the commands that only read configs, never import
    torch (nor pandas)."""
    got = _imports(*args)
    assert got["heavy"] == [], (args, got)


@pytest.mark.parametrize("command", ["runs", "report", "check"])
def test_reading_runs_without_torch(command: str, tiny_run: Path) -> None:
    """``posx runs``, ``report`` and ``check`` read a real run's files without torch (``runs``
    without pandas either: it reads two small CSV files)."""
    root = str(tiny_run.parent.parent)  # ROOT/runs/NAME
    # a preset's claims judged on the run, which records none (exit 3: inconclusive)
    check = ("check", root, "--experiment", "nope_synthetic")
    args = check if command == "check" else (command, "--root", root)
    got = _imports(*args)
    allowed = [] if command == "runs" else ["pandas"]  # a report is pandas' work
    assert got["code"] in (0, 3) and got["heavy"] in ([], allowed), (args, got)
    if command == "runs":
        assert tiny_run.name in got["out"]
