"""`posx runs`: one line per run with its status, identity, progress, loss and eval lengths."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from posx.runs.listing import format_runs, list_runs

IDENT = {"schema_version": 1, "encoding": "rope", "task": "copy", "model": "tiny", "seed": 1,
         "train_length": 16, "steps": 30}  # fmt: skip


def make_run(root: Path, name: str, info: dict | str, metrics=None, evals=None) -> Path:
    run = root / "runs" / name
    run.mkdir(parents=True)
    text = info if isinstance(info, str) else json.dumps({**IDENT, "run": name, **info})
    (run / "run.json").write_text(text)
    if metrics:
        pd.DataFrame({"step": metrics, "loss": [3.0 - s / 100 for s in metrics]}).to_csv(
            run / "metrics.csv", index=False
        )
    if evals:
        pd.DataFrame(evals).to_csv(run / "eval.csv", index=False)
    return run


def test_every_status_on_one_line_each(tmp_path, cli):
    ok = [{"eval_length": n, "status": "ok"} for n in (16, 32)]
    ok.append({"eval_length": 64, "status": "unsupported"})
    make_run(tmp_path, "a_finished", {"status": "trained", "final_loss": 1.23456}, [10, 20, 30], ok)
    make_run(tmp_path, "b_trained", {"status": "trained", "final_loss": 2.0}, [10, 20, 30])
    make_run(tmp_path, "c_interrupted", {"status": "interrupted", "step": 20}, [10, 20])
    make_run(tmp_path, "d_failed", {"status": "failed", "step": 11, "error": "loss became nan"})
    make_run(tmp_path, "e_training", {"status": "training"}, [10])
    make_run(tmp_path, "f_garbage", "{not json")
    got = {line.path.split("/")[-1]: line for line in list_runs(tmp_path)}
    assert got["a_finished"].cells()[:9] == [
        "finished", "rope", "copy", "tiny", "16", "30/30", "1", "1.2346", "16,32"
    ]  # fmt: skip
    assert (got["b_trained"].status, got["b_trained"].lengths) == ("trained", "—")
    assert (got["c_interrupted"].steps, got["c_interrupted"].final_loss) == ("20/30", "2.8000")
    assert (got["d_failed"].status, got["d_failed"].steps) == ("failed", "11/30")
    assert (got["e_training"].status, got["e_training"].steps) == ("training", "10/30")
    assert got["f_garbage"].status == "unreadable"

    out = cli("runs", "--root", str(tmp_path))
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert lines[0].split()[:3] == ["status", "encoding", "task"] and len(lines) == 7
    assert lines[1].startswith("finished  ") and lines[1].endswith("runs/a_finished")
    assert lines == format_runs(list_runs(tmp_path))  # aligned: every column starts together
    assert len({line.index(" rope ") for line in lines[1:6]}) == 1


def test_no_runs_and_missing_root(tmp_path, cli):
    out = cli("runs", "--root", str(tmp_path))
    assert out.returncode == 0 and "no runs under" in out.stdout
    out = cli("runs", "--root", str(tmp_path / "missing"))
    assert out.returncode != 0 and "results root does not exist" in out.stderr


def test_runs_as_json_for_scripts(tmp_path, cli):
    """Issue 35.9: `posx runs --format json`: the table's fields as plain values."""
    import json as json_

    ok = [{"eval_length": n, "status": "ok"} for n in (16, 32)]
    make_run(tmp_path, "a_finished", {"status": "trained", "final_loss": 1.25}, [10, 20, 30], ok)
    make_run(tmp_path, "c_interrupted", {"status": "interrupted", "step": 20}, [10, 20])
    make_run(tmp_path, "f_garbage", "{not json")
    out = cli("runs", "--root", str(tmp_path), "--format", "json")
    assert out.returncode == 0, out.stderr
    got = {r["run"]: r for r in json_.loads(out.stdout)}
    assert got["runs/a_finished"] == {
        "status": "finished", "encoding": "rope", "task": "copy", "model": "tiny", "L_train": 16,
        "steps_done": 30, "steps_total": 30, "seed": 1, "final_loss": 1.25,
        "eval_lengths": [16, 32], "parent": None, "run": "runs/a_finished",
        "path": str(tmp_path / "runs" / "a_finished"), "error": None,
    }  # fmt: skip
    interrupted = got["runs/c_interrupted"]
    assert (interrupted["steps_done"], interrupted["final_loss"]) == (20, 2.8)
    assert interrupted["eval_lengths"] is None  # no eval.csv
    garbage = got["runs/f_garbage"]
    assert garbage["status"] == "unreadable" and garbage["encoding"] is None and garbage["error"]
    # the same fields as the table (its columns, with steps as done and total)
    table = cli("runs", "--root", str(tmp_path)).stdout.splitlines()
    assert table[0].split()[:5] == ["status", "encoding", "task", "model", "L_train"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli("runs", "--root", str(empty), "-f", "json").stdout.strip() == "[]"
    bad = cli("runs", "--root", str(tmp_path), "--format", "xml")
    assert bad.returncode == 2 and "unknown --format 'xml'; choose from table, json" in bad.stderr
