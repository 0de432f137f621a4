"""Bad input fails before any work: one line on stderr naming what is wrong and what is allowed,
exit code 2, and nothing created or changed under the results root.

Complements tests/integration/test_cli_errors.py (unknown options, misspelled keys, odd rotary
dimension, ...); docs/reliability.md lists every case with the test that covers it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from posx.storage.results import atomic_write


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` with its bytes (to prove nothing was created or changed)."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def assert_one_line(proc, code: int, text: str) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("posx: error: "), proc.stderr
    assert text in lines[0], lines[0]
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.fixture
def corpora(tmp_path: Path) -> Path:
    folder = tmp_path / "corpora"
    (folder / "empty_dir").mkdir(parents=True)
    (folder / "empty.txt").write_bytes(b"")
    (folder / "tiny.txt").write_text("just a few bytes\n")
    return folder


TRAIN_CASES = [
    (
        ["model.d_modle=30"],
        "unknown setting 'model.d_modle'; did you mean 'model.d_model'? model keys: d_model,",
    ),
    (["seedd=1"], "did you mean 'seed'? top-level keys: model, train, eval, encoding, task"),
    (
        ["encoding=alibi", "encoding.base=3"],
        "encoding (posx.encodings.alibi.ALiBi) has no setting 'base'; encoding keys: none "
        "(n_heads comes from the model)",
    ),
    (["train.batch_size=0"], "train.batch_size must be positive, got 0"),
    (["train.steps=-3"], "train.steps must be positive, got -3"),
    (["train.lr=abc"], "train.lr must be a number, got 'abc'"),
    (["eval.lengths=[32,16]"], "eval.lengths must be strictly increasing without repeats"),
    (["eval.lengths=[16,24.5]"], "eval.lengths must be an integer, got '24.5'"),
    (["eval.lengths=[]"], "eval.lengths is empty"),
    (["model.n_heads=0"], "model.n_heads must be positive, got 0"),
    (["model.d_model=[1,"], "bad override"),
    (["task=text", "task.corpus={c}/empty.txt"], "corpus is empty"),
    (["task=text", "task.corpus={c}/empty_dir"], "corpus matches no files"),
    (
        ["task=text", "task.corpus={c}/tiny.txt", "train.length=64"],
        "fewer than one sequence of 64 tokens",
    ),
]


@pytest.mark.parametrize(("args", "text"), TRAIN_CASES, ids=[" ".join(a) for a, _ in TRAIN_CASES])
def test_bad_train_input_creates_nothing(cli, tmp_path, corpora, args, text):
    root = tmp_path / "results"
    before = snapshot(corpora)
    args = [a.format(c=corpora) for a in args]
    assert_one_line(cli("train", f"root={root}", "train.steps=1", *args), 2, text)
    assert not root.exists()  # no run directory, not even an empty one
    assert snapshot(corpora) == before


@pytest.mark.parametrize(
    ("lengths", "text"),
    [
        ("", "--lengths must be comma-separated positive integers, got ''"),
        ("16,24.5", "--lengths must be comma-separated positive integers, got '24.5'"),
        ("-16", "--lengths must be positive integers, got -16"),
        ("16,16", "--lengths must be strictly increasing without repeats, got [16, 16]"),
    ],
)
def test_bad_eval_lengths_are_refused_before_any_run_is_read(cli, tmp_path, lengths, text):
    assert_one_line(cli("eval", "--root", str(tmp_path), f"--lengths={lengths}"), 2, text)


def test_results_root_below_a_file(cli, tmp_path):
    blocker = tmp_path / "results"
    blocker.write_text("a file where the results root should go\n")
    line = assert_one_line(
        cli("train", f"root={blocker / 'sub'}", "train.steps=1"), 2, "cannot be created"
    )
    assert f"{blocker} is not a directory" in line
    assert blocker.read_text() == "a file where the results root should go\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_results_root(cli, tmp_path):
    root = tmp_path / "results"
    root.mkdir()
    root.chmod(0o555)
    try:
        line = assert_one_line(cli("train", f"root={root}", "train.steps=1"), 2, "not writable")
        assert "Permission denied" in line
        assert list(root.iterdir()) == []
    finally:
        root.chmod(0o755)


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_results_root_on_an_unwritable_filesystem(cli):
    """/proc refuses new files even to root, so this case runs everywhere on Linux."""
    assert_one_line(
        cli("train", "root=/proc/posx-results", "train.steps=1"),
        2,
        "results root is not writable: /proc/posx-results",
    )


def test_debug_flag_and_env_show_the_traceback(cli, tmp_path, capsys, monkeypatch):
    quiet = cli("train", f"root={tmp_path}", "train.batch_size=0")
    assert quiet.returncode == 2 and "Traceback" not in quiet.stderr
    loud = cli("--debug", "train", f"root={tmp_path}", "train.batch_size=0")
    assert loud.returncode == 2 and "Traceback (most recent call last)" in loud.stderr
    assert loud.stderr.rstrip().endswith("train.batch_size must be positive, got 0")

    from posx.cli import main

    monkeypatch.setenv("POSX_DEBUG", "1")
    monkeypatch.setattr(sys, "argv", ["posx", "train", f"root={tmp_path}", "train.batch_size=0"])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 2 and "Traceback" in capsys.readouterr().err


def test_report_refuses_an_unreadable_table_without_touching_it(cli, tmp_path):
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    (run / "run.json").write_text('{"schema_version": 1, "run": "r"}\n')
    atomic_write(run / "eval.csv", "a,b\n1,2\n1,2,3,4\n")  # a ragged line: not a CSV table
    before = snapshot(tmp_path)
    line = assert_one_line(cli("report", "--root", str(tmp_path)), 1, "cannot read")
    assert "eval.csv" in line
    assert snapshot(tmp_path) == before
