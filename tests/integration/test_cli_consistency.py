"""Every CLI error is one ``posx: error:`` line with exit code 2: Typer's own usage errors, an
unknown Hydra launcher, a key added with ``+`` to a typed group (issue 20, section 5)."""

from __future__ import annotations

from pathlib import Path

import pytest


def error_line(result) -> str:
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("posx: error: "), result.stderr
    assert "Traceback" not in result.stderr and "╭" not in result.stderr + result.stdout
    return lines[0]


USAGE = [
    (["eval", "--window", "abc"], "Invalid value for '--window'"),
    (["eval", "--lengths"], "Option '--lengths' requires an argument"),
    (["report", "--digits", "x"], "Invalid value for '--digits'"),
    (["report", "--nosuch"], "No such option: --nosuch"),
    (["resume"], "Missing argument 'run'"),
    (["sweep", "status"], "Missing argument 'sweep_dir'"),
    (["list", "encoding", "rope", "extra"], "Got unexpected extra argument(s) (extra)"),
    (["nosuchcommand"], "No such command 'nosuchcommand'"),
]


@pytest.mark.parametrize(("args", "text"), USAGE, ids=[" ".join(a) for a, _ in USAGE])
def test_typer_usage_errors_are_one_line(cli, args, text):
    result = cli(*args)
    line = error_line(result)
    assert result.returncode == 2 and text in line, line
    assert "--help`" in line  # where to look for what is allowed


def test_usage_error_through_the_real_entry_point(posx):
    proc = posx("eval", "--window", "abc")
    assert proc.returncode == 2, proc.stderr
    assert error_line(proc).startswith("posx: error: Invalid value for '--window'")


def test_no_arguments_still_shows_the_help(cli):
    result = cli()
    assert result.returncode == 2 and "Usage:" in result.stdout and not result.stderr


@pytest.mark.parametrize(
    ("override", "text"),
    [
        ("+train.stepz=5", "unknown key 'train.stepz'"),
        ("+model.d_modle=64", "unknown key 'model.d_modle'"),
        ("+seedz=1", "unknown key 'seedz'"),
    ],
)
def test_plus_cannot_add_keys_to_typed_groups(cli, tiny_overrides, tmp_path: Path, override, text):
    result = cli("train", *tiny_overrides, "train.steps=1", override)
    line = error_line(result)
    assert result.returncode == 2 and text in line and "did you mean" in line, line
    assert not list(tmp_path.iterdir())


def test_plus_still_adds_parameters_to_open_groups(cli, tiny_overrides):
    """``encoding`` is open (a user's class takes its own arguments), so ``+`` adds there, and
    the constructor's signature decides."""
    result = cli("train", *tiny_overrides, "train.steps=1", "+encoding.nosuch=1")
    line = error_line(result)
    assert result.returncode == 2 and "has no parameter 'nosuch'" in line, line


def test_unknown_hydra_launcher_is_one_line(cli, tiny_overrides, tmp_path: Path):
    result = cli("train", *tiny_overrides, "train.steps=1", "hydra/launcher=nosuch")
    line = error_line(result)
    assert result.returncode == 2, result.stderr
    assert "unknown hydra/launcher 'nosuch'; choose from: basic, joblib" in line, line
    assert not list(tmp_path.iterdir())
