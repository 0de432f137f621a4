"""Damaged or foreign run files: one line naming the file and what is wrong, never a traceback;
``posx report`` leaves a damaged table out with a warning and reports the rest (issue 20,
section 2)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest


def error_line(result) -> str:
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("posx: error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def set_json(path: Path, **fields) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


RUN_FILE_DAMAGE = {
    "garbage run.json": ("run.json", lambda p: p.write_text("{not json"), "run.json is damaged"),
    "run.json not an object": (
        "run.json",
        lambda p: p.write_text("[1, 2]"),
        "a JSON object was expected, found list",
    ),
    "text schema_version in run.json": (
        "run.json",
        lambda p: set_json(p, schema_version="one"),
        "schema_version is 'one', not an integer",
    ),
    "garbage config.yaml": (
        ".hydra/config.yaml",
        lambda p: p.write_text("model: [unclosed\n"),
        ".hydra/config.yaml is damaged",
    ),
    "config.yaml not a mapping": (
        ".hydra/config.yaml",
        lambda p: p.write_text("- a\n- b\n"),
        "a mapping of settings was expected",
    ),
    "config.yaml with a wrong type": (
        ".hydra/config.yaml",
        lambda p: p.write_text(p.read_text().replace("d_model: 32", "d_model: wide")),
        "could not be converted to Integer at model.d_model",
    ),
    "text schema_version in trainer.json": (
        "checkpoint/trainer.json",
        lambda p: set_json(p, schema_version="one"),
        "trainer.json of",
    ),
}


@pytest.mark.parametrize("case", RUN_FILE_DAMAGE, ids=list(RUN_FILE_DAMAGE))
def test_eval_names_the_damaged_file(cli, copy_run, case):
    name, damage, text = RUN_FILE_DAMAGE[case]
    run = copy_run()
    damage(run / name)
    before = snapshot(run)
    result = cli("eval", str(run), "--lengths", "16", "--no-progress")
    line = error_line(result)
    assert result.returncode == 1 and text in line and name.split("/")[-1] in line, line
    assert snapshot(run) == before


@pytest.mark.parametrize(
    ("content", "text"),
    [("- [unclosed\n", "overrides.yaml is damaged"), ("a: 1\n", "a list of key=value")],
)
def test_resume_names_a_damaged_overrides_file(cli, copy_run, content, text):
    run = copy_run()
    (run / ".hydra" / "overrides.yaml").write_text(content)
    before = snapshot(run)
    result = cli("resume", str(run))
    assert result.returncode == 1 and text in error_line(result)
    assert snapshot(run) == before


def test_eval_refuses_a_foreign_eval_table_before_any_work(cli, copy_run):
    run = copy_run()
    (run / "eval.csv").write_text("foo,bar\n1,2\n")
    before = snapshot(run)
    result = cli("eval", str(run), "--lengths", "16", "--no-progress")
    line = error_line(result)
    assert result.returncode == 1 and "cannot merge into" in line and "eval.csv" in line, line
    assert "it has no eval_length, mode, window, stride, overrides column" in line
    assert snapshot(run) == before


# --- a corpus that changed after training ------------------------------------------------

LEGACY_CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "legacy" / "corpus.txt"
TEXT_RUN = ["task=text", "model.d_model=8", "model.n_heads=2", "model.n_layers=1",
            "model.d_ff=16", "train.length=16", "train.batch_size=4", "train.steps=2",
            "train.warmup_steps=1", "train.progress=false", "eval.lengths=[16]",
            "eval.tokens=64"]  # fmt: skip


@pytest.fixture(scope="module")
def text_run(tmp_path_factory) -> Path:
    """A run trained (by ``posx train``, in this process) on ``corpus.txt`` of its working
    directory: a relative path, so a copy of the run reads the ``corpus.txt`` beside it."""
    import contextlib

    from tests.conftest import run_in_process

    folder = tmp_path_factory.mktemp("text_run")
    (folder / "corpus.txt").write_bytes(LEGACY_CORPUS.read_bytes())
    with contextlib.chdir(folder):
        done = run_in_process("train", *TEXT_RUN, "task.corpus=corpus.txt", "root=results")
    assert done.returncode == 0, done.stderr
    return next((folder / "results").rglob("run.json")).parent


@pytest.fixture
def posx_in(cli, monkeypatch):
    """``posx ARGS`` run from folder ``cwd``, in this process (the ``cli`` fixture; a
    subprocess per call spent more time importing torch than checking the corpus)."""

    def run(*args: str, cwd: Path):
        monkeypatch.chdir(cwd)
        return cli(*args)

    return run


@pytest.fixture
def changed_corpus(text_run, tmp_path) -> Path:
    """A copy of the text run (under ``tmp_path/results/runs``) whose ``corpus.txt`` differs in
    one byte from the one it was trained on."""
    import shutil

    run = Path(shutil.copytree(text_run, tmp_path / "results" / "runs" / "text"))
    data = bytearray(LEGACY_CORPUS.read_bytes())
    data[-100] = ord("#") if data[-100] != ord("#") else ord("%")
    (tmp_path / "corpus.txt").write_bytes(bytes(data))
    return run


def test_eval_refuses_a_run_whose_corpus_changed(posx_in, changed_corpus, tmp_path):
    """The rebuilt corpus is checked against the checksum run.json recorded at training: an
    edited corpus is refused in one line that names it and what changed, before any work."""
    run = changed_corpus
    recorded = json.loads((run / "run.json").read_text())["task_info"]["corpus_crc32"]
    before = snapshot(run)
    result = posx_in("eval", str(run), "--lengths", "16", "--no-progress", cwd=tmp_path)
    line = error_line(result)
    assert result.returncode == 1, result.stderr
    assert "the corpus 'corpus.txt' has changed since the run was trained" in line, line
    assert f"crc32 {recorded} -> " in line and "task.corpus=corpus.txt" in line, line
    assert snapshot(run) == before


def test_resume_refuses_a_run_whose_corpus_changed(posx_in, changed_corpus, tmp_path):
    """A run killed after training, before its evaluation, resumes into that evaluation: on an
    edited corpus it would score other text, so `posx resume` refuses it as `posx eval` does."""
    run = changed_corpus
    (run / "eval.csv").unlink()
    (run / "eval_positions.csv").unlink(missing_ok=True)
    before = snapshot(run)
    result = posx_in("resume", str(run), cwd=tmp_path)
    line = error_line(result)
    assert result.returncode == 1, result.stderr
    assert "the corpus 'corpus.txt' has changed since the run was trained" in line, line
    assert snapshot(run) == before


def test_eval_of_a_changed_corpus_on_request_records_it(posx_in, changed_corpus, tmp_path):
    """Evaluating on the corpus as it is now is an eval-time override, recorded in the row."""
    run = changed_corpus
    args = ("eval", str(run), "--lengths", "16", "--no-progress", "task.corpus=corpus.txt")
    result = posx_in(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = pd.read_csv(run / "eval.csv", keep_default_na=False)
    assert "task.corpus=corpus.txt" in set(rows["overrides"]), rows["overrides"]


def test_the_python_api_refuses_a_run_whose_corpus_changed(changed_corpus, tmp_path, monkeypatch):
    """``posx.api.evaluate`` (no run selection before it) checks the corpus too."""
    from posx.api import evaluate
    from posx.errors import PosxError

    before = snapshot(changed_corpus)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PosxError, match="has changed since the run was trained"):
        evaluate("results/runs/text", [16], device="cpu")
    assert snapshot(changed_corpus) == before


def test_eval_root_skips_a_run_whose_corpus_changed(posx_in, changed_corpus, text_run, tmp_path):
    """Under ``--root`` the run is skipped with its reason; a run of an unchanged corpus (its
    own ``corpus.txt``, elsewhere) is still evaluated."""
    import shutil

    result = posx_in("eval", "--root", "results", "--lengths", "16", "--no-progress", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "posx: skipping: " in result.stderr and "has changed since" in result.stderr
    assert "1 run(s) skipped, damaged or refused: text" in result.stderr, result.stderr
    same = Path(shutil.copytree(text_run.parent.parent.parent, tmp_path / "same"))
    result = posx_in("eval", "--root", "results", "--lengths", "16", "--no-progress", cwd=same)
    assert result.returncode == 0, result.stderr


# --- sweep status --------------------------------------------------------------------------


def fake_sweep(root: Path) -> Path:
    """A sweep directory as Hydra leaves it: multirun.yaml and one directory per job."""
    (root / "multirun.yaml").write_text('hydra:\n  overrides:\n    task: ["seed=0,1"]\n')
    for job in (0, 1):
        (root / str(job) / ".hydra").mkdir(parents=True)
        (root / str(job) / ".hydra" / "overrides.yaml").write_text(f"- seed={job}\n")
        (root / str(job) / "run.json").write_text('{"status": "trained", "final_loss": 1.5}')
        (root / str(job) / "eval.csv").write_text("eval_length\n16\n")
    return root


def test_sweep_status_shows_a_damaged_run_json_as_one_row(cli, tmp_path):
    sweep = fake_sweep(tmp_path)
    (sweep / "1" / "run.json").write_text("{garbage")
    result = cli("sweep", "status", str(sweep))
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert "1 finished, 1 damaged of 2 jobs" in result.stdout, result.stdout
    assert "run.json is damaged" in " ".join(result.stdout.split())


@pytest.mark.parametrize("content", ["hydra: [unclosed\n", "- just a list\n", "a: 1\n"])
def test_sweep_status_names_a_damaged_multirun_yaml(cli, tmp_path, content):
    sweep = fake_sweep(tmp_path)
    (sweep / "multirun.yaml").write_text(content)
    result = cli("sweep", "status", str(sweep))
    line = error_line(result)
    assert result.returncode == 1 and "multirun.yaml is damaged" in line, line


# --- report --------------------------------------------------------------------------------


def replace_cell(path: Path, column: str, value: str) -> None:
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame.loc[0, column] = value
    frame.to_csv(path, index=False)


REPORT_DAMAGE = {
    "foreign eval.csv": ("eval.csv", lambda p: p.write_text("foo,bar\n1,2\n"), "no encoding"),
    "ragged eval.csv": ("eval.csv", lambda p: p.write_text("a,b\n1,2\n1,2,3,4\n"), "tokenizing"),
    "text schema_version": (
        "eval.csv",
        lambda p: replace_cell(p, "schema_version", "x"),
        "schema_version 'x' in line 2 is not an integer",
    ),
    "text eval_length": (
        "eval.csv",
        lambda p: replace_cell(p, "eval_length", "long"),
        "eval_length 'long' in line 2 is not an integer",
    ),
    "eval_length past int64": (
        "eval.csv",
        lambda p: replace_cell(p, "eval_length", "99999999999999999999999"),
        "eval_length 99999999999999999999999 in line 2 is not an integer (int64)",
    ),
    "newer schema": (
        "eval.csv",
        lambda p: replace_cell(p, "schema_version", "99"),
        "has an unknown schema version (99); upgrade posx",
    ),
    "garbage eval_positions.csv": (
        "eval_positions.csv",
        lambda p: p.write_bytes(b'\x00\x01garbage\n,,\n"'),
        "eval_positions.csv",
    ),
    "garbage metrics.csv": ("metrics.csv", lambda p: p.write_text("a\n1,2,3\n"), "metrics.csv"),
    "garbage run.json": ("run.json", lambda p: p.write_text("{garbage"), "run.json is damaged"),
}


@pytest.mark.parametrize("case", REPORT_DAMAGE, ids=list(REPORT_DAMAGE))
def test_report_skips_a_damaged_file_and_reports_the_rest(cli, copy_run, tmp_path, case):
    name, damage, text = REPORT_DAMAGE[case]
    copy_run("good")
    bad = copy_run("bad")
    damage(bad / name)
    before = snapshot(tmp_path)
    result = cli(
        "report", "--root", str(tmp_path), "--format", "csv", "--plot", str(tmp_path / "p")
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    # (the report's other warnings, e.g. a plot it leaves out, are not about damage)
    warnings = [x for x in result.stderr.splitlines() if "skipping" in x]
    assert len(warnings) == 1 and warnings[0].startswith("posx: warning: skipping"), warnings
    assert text in warnings[0] and str(bad) in warnings[0], warnings[0]
    table = result.stdout.split("\nwrote ")[0]  # then: "wrote N plot files to ..."
    rows = pd.read_csv(io.StringIO(table))
    # Both runs are copies of one (same config and seed), so the report keeps only the newer
    # and says so: that warning shows the damaged run's other tables were still read. A
    # damaged eval.csv leaves only the good run; a damaged run.json, see below.
    assert len(rows) and set(rows["n"]) == {1}, rows
    duplicate = any("duplicate runs" in x for x in result.stderr.splitlines())
    if name == "run.json":
        # What only run.json records (the precision `auto` resolved to) is unknown for the
        # damaged run: its rows are still reported, as a configuration of their own.
        assert not duplicate and set(rows["n"]) == {1}, result.stderr
        assert any("train.precision=auto" in label for label in rows["label"]), rows["label"]
    else:
        assert duplicate == (name != "eval.csv"), result.stderr
    assert {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("p/")} == before


def test_report_fails_when_every_table_is_damaged(cli, copy_run, tmp_path):
    for name in ("a", "b"):
        replace_cell(copy_run(name) / "eval.csv", "eval_length", "long")
    result = cli("report", "--root", str(tmp_path))
    line = error_line(result)
    assert result.returncode == 1 and "is not an integer" in line, line
    assert "(and 1 more damaged eval.csv); nothing left to report" in line
