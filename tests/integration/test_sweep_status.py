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
