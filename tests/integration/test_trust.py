"""A shared run directory cannot run code (issue 20, section 1).

Every poisoned run below would create or truncate a marker file if its ``_target_`` were built;
``posx eval RUN``, ``posx eval --root ROOT`` and ``posx resume RUN`` must refuse it in one line
and the marker must never appear. A user's own package is built once they trust it
(``--trust`` or ``POSX_TRUST``); a symlinked lock or Hydra file never writes elsewhere; a config
edited to another encoding is refused against the checkpoint's recorded identity.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml


def error_line(result) -> str:
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert lines and lines[-1].startswith("posx: error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[-1]


def edit_config(run: Path, **groups) -> None:
    path = run / ".hydra" / "config.yaml"
    cfg = yaml.safe_load(path.read_text())
    cfg.update(groups)
    path.write_text(yaml.safe_dump(cfg))


def add_overrides(run: Path, *lines: str) -> None:
    path = run / ".hydra" / "overrides.yaml"
    path.write_text(yaml.safe_dump([*yaml.safe_load(path.read_text()), *lines]))


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# Configs that would write the marker file ({m}) if built.
POISONS = {
    "open for writing": lambda m: {
        "positions": {"_target_": "builtins.open", "file": m, "mode": "w"}
    },
    "Path.touch": lambda m: {
        "positions": {
            "_target_": "pathlib.Path.touch",
            "_args_": [{"_target_": "pathlib.Path", "_args_": [m]}],
        }
    },
    "nested in a posx encoding's arguments": lambda m: {
        "encoding": {
            "_target_": "posx.encodings.base.NoPE",
            "unused": {"_target_": "builtins.open", "file": m, "mode": "w"},
        }
    },
    "posx function, not a class": lambda m: {
        "positions": {"_target_": "posx.storage.results.atomic_write", "path": m, "data": "x"}
    },
    "attribute path through a posx module": lambda m: {
        "positions": {
            "_target_": "posx.tasks.text.Path.touch",
            "_args_": [{"_target_": "posx.tasks.text.Path", "_args_": [m]}],
        }
    },
}


@pytest.mark.parametrize("poison", POISONS, ids=list(POISONS))
@pytest.mark.parametrize("how", ["eval RUN", "eval --root"])
def test_poisoned_config_is_never_built_by_eval(cli, copy_run, tmp_path, poison, how):
    run = copy_run("poisoned")
    marker = tmp_path / "MARKER"
    edit_config(run, **POISONS[poison](str(marker)))
    before = snapshot(run)
    if how == "eval RUN":
        result = cli("eval", str(run), "--no-progress")
        assert result.returncode == 2, result.stderr
    else:
        result = cli("eval", "--root", str(tmp_path), "--no-progress")
        assert result.returncode == 1 and "posx: skipping: " in result.stderr, result.stderr
    line = error_line(result) if how == "eval RUN" else result.stderr
    assert "_target_" in line and "--trust" in line and "POSX_TRUST" in line, line
    assert not marker.exists()
    assert snapshot(run) == before


def test_eval_root_evaluates_the_other_runs(cli, copy_run, tmp_path):
    good, bad = copy_run("good"), copy_run("bad")
    marker = tmp_path / "MARKER"
    edit_config(bad, **POISONS["open for writing"](str(marker)))
    result = cli("eval", "--root", str(tmp_path), "--lengths", "24", "--no-progress")
    assert result.returncode == 1 and "1 run(s) skipped, damaged or refused: bad" in result.stderr
    assert 24 in set(pd.read_csv(good / "eval.csv")["eval_length"])
    assert 24 not in set(pd.read_csv(bad / "eval.csv")["eval_length"])
    assert not marker.exists()


@pytest.mark.parametrize(
    "lines",
    [
        ["positions._target_=builtins.open", "+positions.file={m}", "+positions.mode=w"],
        ["encoding._target_=pathlib.Path.touch", "+encoding._args_=[{m}]"],
    ],
    ids=["open for writing", "Path.touch"],
)
def test_poisoned_overrides_are_never_built_by_resume(cli, copy_run, tmp_path, lines):
    run = copy_run()
    marker = tmp_path / "MARKER"
    add_overrides(run, *(x.format(m=marker) for x in lines))
    before = snapshot(run)
    result = cli("resume", str(run))
    line = error_line(result)
    assert result.returncode == 2 and "is not posx code" in line and "--trust" in line, line
    assert not marker.exists()
    assert snapshot(run) == before


@pytest.mark.parametrize(
    "line",
    ["hydra.job_logging.root.level=DEBUG", "+hydra.callbacks.x._target_=builtins.print",
     "hydra/launcher=joblib", "--config-dir=/tmp"],
)  # fmt: skip
def test_resume_refuses_hydra_settings_from_the_run(cli, copy_run, line):
    run = copy_run()
    add_overrides(run, line)
    before = snapshot(run)
    result = cli("resume", str(run))
    assert result.returncode == 2 and "not Hydra's settings or flags" in error_line(result)
    assert snapshot(run) == before


def test_run_json_cannot_grant_trust(cli, copy_run, tmp_path):
    """A run that claims in its run.json to need builtins gets no trust from that."""
    run = copy_run()
    marker = tmp_path / "MARKER"
    edit_config(run, **POISONS["open for writing"](str(marker)))
    info = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**info, "needs_trust": ["builtins"]}))
    result = cli("eval", str(run), "--no-progress")
    assert result.returncode == 2 and "needs --trust builtins" in error_line(result)
    assert not marker.exists()


# --- a user's own package ------------------------------------------------------------------

PACKAGE = '''
from posx.encodings.base import PositionalEncoding


class Shifted(PositionalEncoding):
    """NoPE with a constructor argument: a stand-in for a user's own encoding."""

    def __init__(self, shift: int = 0) -> None:
        super().__init__()
        self.shift = shift
'''


@pytest.fixture(scope="module")
def user_run(tmp_path_factory, posx_in_process, tiny_args) -> Path:
    """A run trained (from the user's command line) with an encoding from a user package."""
    folder = tmp_path_factory.mktemp("userpkg")
    (folder / "posxuser_pkg").mkdir()
    (folder / "posxuser_pkg" / "__init__.py").write_text("")
    (folder / "posxuser_pkg" / "enc.py").write_text(PACKAGE)
    sys.path.insert(0, str(folder))
    target = "encoding._target_=posxuser_pkg.enc.Shifted"
    result = posx_in_process(
        "train", *tiny_args, "train.steps=10", "encoding=nope", target, "+encoding.shift=1",
        f"root={folder / 'results'}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    yield next((folder / "results").rglob("run.json")).parent
    sys.path.remove(str(folder))


def test_training_records_what_the_run_needs_trusted(user_run):
    assert json.loads((user_run / "run.json").read_text())["needs_trust"] == ["posxuser_pkg"]


def test_a_run_from_before_needs_trust_is_told_what_to_do(cli, user_run, tmp_path, monkeypatch):
    """A legitimate run trained before posx recorded ``needs_trust`` is not suspected of an
    edited config: the message says what is unknown and how to allow the target."""
    import shutil

    monkeypatch.delenv("POSX_TRUST", raising=False)
    run = Path(shutil.copytree(user_run, tmp_path / "old_run"))
    info = json.loads((run / "run.json").read_text())
    del info["needs_trust"]
    (run / "run.json").write_text(json.dumps(info))
    line = error_line(cli("eval", str(run), "--lengths", "16", "--no-progress"))
    assert "edited" not in line, line
    assert "trained before posx recorded what a run needs trusted" in line, line
    assert "pass --trust posxuser_pkg.enc.Shifted" in line, line
    trusted = ("--trust", "posxuser_pkg.enc.Shifted")
    assert cli("eval", str(run), "--lengths", "16", "--no-progress", *trusted).returncode == 0


def test_user_package_needs_trust_to_be_loaded(cli, user_run, monkeypatch):
    monkeypatch.delenv("POSX_TRUST", raising=False)
    result = cli("eval", str(user_run), "--lengths", "16", "--no-progress")
    line = error_line(result)
    assert result.returncode == 2, result.stderr
    assert "'posxuser_pkg.enc.Shifted'" in line and "needs --trust posxuser_pkg" in line, line

    result = cli(
        "eval", str(user_run), "--lengths", "16", "--no-progress", "--trust", "posxuser_pkg"
    )
    assert result.returncode == 0, result.stderr
    monkeypatch.setenv("POSX_TRUST", "otherpkg, posxuser_pkg")
    result = cli("eval", str(user_run), "--lengths", "16", "--no-progress")
    assert result.returncode == 0, result.stderr


def test_user_package_resumes_with_trust(cli, user_run, tmp_path, monkeypatch):
    import shutil

    monkeypatch.delenv("POSX_TRUST", raising=False)
    run = Path(shutil.copytree(user_run, tmp_path / "runs" / "user"))
    result = cli("resume", str(run))
    assert result.returncode == 2 and "needs --trust posxuser_pkg" in error_line(result)
    result = cli("resume", str(run), "--trust", "posxuser_pkg")
    assert result.returncode == 0, result.stderr


def test_bad_trust_value_is_one_line(cli, copy_run):
    result = cli("eval", str(copy_run()), "--trust", "not a module")
    assert result.returncode == 2 and "--trust / POSX_TRUST takes module" in error_line(result)


# --- symbolic links ------------------------------------------------------------------------


def test_symlinked_lock_file_creates_nothing_elsewhere(cli, copy_run, tmp_path):
    run = copy_run()
    target = tmp_path / "elsewhere" / "created_by_posx"
    target.parent.mkdir()
    (run / ".eval.csv.lock").unlink(missing_ok=True)
    (run / ".eval.csv.lock").symlink_to(target)
    result = cli("eval", str(run), "--lengths", "16", "--no-progress")
    line = error_line(result)
    assert result.returncode == 1 and ".eval.csv.lock is a symbolic link" in line, line
    assert not target.exists()


@pytest.mark.parametrize("name", [".hydra/hydra.yaml", "posx.log"])
def test_resume_never_writes_through_a_symlink(cli, copy_run, tmp_path, name):
    run = copy_run()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(victim)
    result = cli("resume", str(run))
    assert result.returncode == 2 and "is a symbolic link" in error_line(result)
    assert victim.read_text() == "precious\n"


# --- the checkpoint's identity -------------------------------------------------------------


def test_config_edited_to_another_encoding_is_refused(cli, copy_run):
    """rope -> alibi keeps every tensor shape, so only the recorded identity can tell."""
    run = copy_run()
    config = run / ".hydra" / "config.yaml"
    cfg = yaml.safe_load(config.read_text())
    cfg["encoding"] = {"_target_": "posx.encodings.alibi.ALiBi", "_partial_": True}
    config.write_text(yaml.safe_dump(cfg))
    before = snapshot(run)
    result = cli("eval", str(run), "--lengths", "16", "--no-progress")
    line = error_line(result)
    assert result.returncode == 1 and "does not match the checkpoint" in line, line
    assert "encoding._target_ is 'posx.encodings.alibi.ALiBi' there but " in line, line
    assert snapshot(run) == before


def test_resume_with_edited_overrides_is_refused(cli, copy_run):
    run = copy_run()
    add_overrides(run, "encoding=alibi")
    before = snapshot(run)
    result = cli("resume", str(run))
    line = error_line(result)
    assert result.returncode == 1 and "does not match the checkpoint" in line, line
    assert snapshot(run) == before


def test_eval_time_overrides_still_change_the_encoding(cli, copy_run):
    """The identity is checked on the saved config; eval-time key=value stays allowed."""
    run = copy_run()
    result = cli("eval", str(run), "--lengths", "16", "--no-progress", "encoding.base=500")
    assert result.returncode == 0, result.stderr
    assert "encoding.base=500" in (run / "eval.csv").read_text()
