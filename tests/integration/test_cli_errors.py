"""Bad input: one line on stderr naming what was wrong, a non-zero exit, no traceback."""

from __future__ import annotations

import pytest

TRAIN_ERRORS = [
    (["encoding=nosuch"], "unknown encoding 'nosuch'; choose from: alibi"),
    (["task=nosuch"], "unknown task 'nosuch'; choose from:"),
    (["model=huge"], "unknown model 'huge'; choose from: small, tiny"),
    (["-m", "encoding=rope,nosuch"], "unknown encoding 'nosuch'"),
    (["model.d_model=30"], "must be divisible by model.n_heads"),
    (["model.d_modle=30"], "d_modle"),
    (["train.steps=abc"], "abc"),
    (["train.length=0"], "train.length must be positive"),
    (["eval.lengths=[64,0]"], "eval.lengths must be positive integers"),
    (["model.d_model=24", "encoding=rope", "encoding.rotary_fraction=0.5"], "rotary dimension"),
    (["task=text", "task.corpus=/nonexistent/corpus.txt"], "corpus path does not exist"),
    (["encoding.bse=3"], "'bse'"),
    (["encoding._target_=nosuch.Encoding"], "cannot be loaded: No module named 'nosuch'"),
]


def assert_one_line_error(proc, code: int, text: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("posx: error:") and text in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("args", "text"), TRAIN_ERRORS, ids=[" ".join(a) for a, _ in TRAIN_ERRORS])
def test_bad_train_input(cli, tmp_path, args, text):
    proc = cli("train", f"root={tmp_path}", "train.steps=1", *args)
    assert_one_line_error(proc, 2, text)
    assert not (tmp_path / "runs").exists()  # nothing half-made


@pytest.mark.parametrize(
    ("lengths", "text"),
    [
        ("0,16", "positive integers"),
        ("16,abc", "comma-separated"),
        ("32,16", "strictly increasing"),
    ],
)
def test_bad_eval_lengths(cli, tmp_path, lengths, text):
    assert_one_line_error(cli("eval", "--root", str(tmp_path), "--lengths", lengths), 2, text)


def test_eval_of_missing_run_dir(cli, tmp_path):
    assert_one_line_error(cli("eval", str(tmp_path / "nope")), 2, "run directory does not exist")


def test_eval_of_run_without_checkpoint(cli, tmp_path):
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("seed: 0\n")
    (run / "run.json").write_text("{}")
    assert_one_line_error(cli("eval", str(run)), 1, "run has no checkpoint")


def test_report_on_empty_or_missing_root(cli, tmp_path):
    assert_one_line_error(cli("report", "--root", str(tmp_path)), 2, "no eval.csv found")
    assert_one_line_error(
        cli("report", "--root", str(tmp_path / "x")), 2, "results root does not exist"
    )


def test_error_through_the_real_entry_point(posx, tmp_path):
    """The console script itself (not just main()) exits 2 with one line."""
    assert_one_line_error(posx("train", f"root={tmp_path}", "encoding=nosuch"), 2, "choose from")


def test_misspelled_eval_override(posx, cli, tiny_overrides, tmp_path):
    posx("train", "encoding=rope", *tiny_overrides, check=True)
    run = next(tmp_path.rglob("run.json")).parent
    before = (run / "eval.csv").read_bytes()
    assert_one_line_error(cli("eval", str(run), "encoding.bse=4"), 2, "'bse'")
    assert_one_line_error(cli("eval", str(run), "--lengths", "16", "stray"), 2, "does not exist")
    assert (run / "eval.csv").read_bytes() == before  # nothing lost or half-written
