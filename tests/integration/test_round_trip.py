"""What one command prints, the next one takes (issue 57.4): the run paths of `posx runs`, the
labels of `posx report` as typed with `x` for `×` (as run directories spell them)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.unit.report.test_report_units import write_run


def test_the_path_posx_runs_prints_is_one_posx_eval_takes(cli, tiny_run, tmp_path, monkeypatch):
    run = Path(shutil.copytree(tiny_run, tmp_path / "results" / "demo" / "sweep1" / "run_a"))
    monkeypatch.chdir(tmp_path)
    listed = cli("runs", "--root", "results")
    assert listed.returncode == 0, listed.stderr
    shown = listed.stdout.splitlines()[1].split()[-1]
    assert shown == "results/demo/sweep1/run_a" and Path(shown).resolve() == run.resolve()
    evaluated = cli("eval", shown, "--lengths", "16", "--no-progress")
    assert evaluated.returncode == 0, evaluated.stderr


def test_report_takes_an_encoding_typed_with_x(cli, tmp_path):
    rows = [{"eval_length": n, "loss": 1.0 + n / 1000} for n in (16, 32)]
    write_run(tmp_path, "copy", "rope+yarn×4+ft@256", 0, rows)
    write_run(tmp_path, "copy", "rope", 0, rows)
    for typed in ("rope+yarn×4+ft@256", "rope+yarnx4+ft@256"):
        out = cli("report", "--root", str(tmp_path), "--encoding", typed, "--format", "csv")
        assert out.returncode == 0, out.stderr
        assert "rope+yarn×4+ft@256" in out.stdout and "\nrope," not in out.stdout, out.stdout
    bad = cli("report", "--root", str(tmp_path), "--encoding", "rope+yarnx8")
    assert bad.returncode == 2 and "no results for --encoding 'rope+yarnx8'" in bad.stderr
