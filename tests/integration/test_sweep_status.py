"""`posx sweep status` tells finished, failed, incomplete and missing jobs apart."""

from __future__ import annotations

import json
import shutil

import pytest

from posx.runs.sweeps import sweep_status


@pytest.mark.slow
def test_sweep_status_of_a_real_sweep(posx, cli, tiny_overrides, tmp_path):
    proc = posx("train", "-m", "encoding=nope,alibi", "seed=0,1", *tiny_overrides)
    assert proc.returncode == 0, proc.stderr
    sweep = next((tmp_path / "sweeps").iterdir())
    jobs = sweep_status(sweep)
    assert [j.status for j in jobs] == ["finished"] * 4
    assert [j.swept for j in jobs][:2] == [
        {"encoding": "nope", "seed": "0"},
        {"encoding": "nope", "seed": "1"},
    ]

    # a job that never ran, one that failed, one that stopped mid-training
    shutil.rmtree(jobs[0].run_dir)
    info = jobs[1].run_dir / "run.json"
    info.write_text(
        json.dumps({**json.loads(info.read_text()), "status": "failed", "error": "boom"})
    )
    info = jobs[2].run_dir / "run.json"
    meta = json.loads(info.read_text())
    meta.pop("status")
    info.write_text(json.dumps(meta))
    got = [(j.status, j.detail) for j in sweep_status(sweep)]
    assert got[0] == ("missing", "never started")
    assert got[1] == ("failed", "boom")
    assert got[2][0] == "incomplete" and got[3][0] == "finished"

    out = cli("sweep", "status", str(sweep))
    assert (
        out.returncode == 0
        and "1 finished, 1 failed, 1 incomplete, 1 missing of 4 jobs" in out.stdout
    )


def test_sweep_status_of_a_non_sweep_dir(cli, tmp_path):
    out = cli("sweep", "status", str(tmp_path))
    assert out.returncode == 2 and "not a sweep directory" in out.stderr


def test_sweep_jobs_are_expanded_in_hydras_order():
    """The expansion matches Hydra's basic sweeper (its private API is the oracle here)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from posx.runs.sweeps import expand_sweep

    for overrides in (
        ["encoding=nope,rope", "seed=0,1,2", "train.steps=5"],
        ["a=1,2", "b=x", "c=range(3)", "+d=choice(p,q)"],
        ["task=copy"],
    ):
        parsed = OverridesParser.create().parse_overrides(overrides)
        batches = BasicSweeper.split_arguments(parsed, None)
        assert expand_sweep(overrides) == [list(job) for batch in batches for job in batch]


@pytest.mark.parametrize("columns", [60, 80, 120])
def test_sweep_status_never_cuts_the_run_name(posx, tmp_path, monkeypatch, columns):
    """The run name is the field one copies (to `posx eval`, `posx extend`): at any width it
    is printed whole, on one line; the other columns wrap around it."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    task: ['encoding=nope,rope', 'seed=0', "
        "'task.corpus=/a/long/path/to/a/corpus/file.txt']\n  sweeper:\n    params: {}\n"
    )
    names = []
    for encoding in ("nope", "rope"):
        run = sweep / f"text_{encoding}_L256_s0_20261128-194152_5643f7a1"
        (run / ".hydra").mkdir(parents=True)
        (run / ".hydra" / "overrides.yaml").write_text(
            f"- encoding={encoding}\n- seed=0\n- task.corpus=/a/long/path/to/a/corpus/file.txt\n"
        )
        (run / "run.json").write_text(json.dumps({"status": "trained", "final_loss": 1.5}))
        (run / "eval.csv").write_text("eval_length,loss\n16,1.5\n")
        names.append(run.name)
    monkeypatch.setenv("COLUMNS", str(columns))
    out = posx("sweep", "status", str(sweep))
    assert out.returncode == 0, out.stderr
    for name in names:
        assert name in out.stdout, out.stdout  # whole, on one line
    assert out.stdout.count("finished") == 3 and "encoding=rope" in out.stdout, out.stdout
    assert max(map(len, out.stdout.splitlines()[1:])) <= columns, out.stdout
