"""The Python API: `import posx` stays light; posx.compose records what names a run; a config
that cannot train leaves nothing behind. (Training itself: tests/integration/test_readme_api.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import posx
from posx.errors import ConfigError


def test_import_posx_is_light():
    code = "import sys, posx\nassert not {'torch', 'hydra', 'pandas'} & set(sys.modules)\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_api_functions_are_not_hidden_by_modules():
    import posx.evaluation.sweep
    import posx.training.loop  # noqa: F401  (importing a submodule sets the package's attribute)

    assert {f.__module__ for f in (posx.compose, posx.train, posx.evaluate)} == {"posx.api"}
    assert posx.load_results.__module__ == "posx.api" and "train" in dir(posx)


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'trian'"):
        posx.trian  # noqa: B018


def test_compose_records_the_chosen_yamls():
    cfg = posx.compose("encoding=alibi", "task=copy")
    assert cfg.chosen.encoding == {"name": "alibi", "target": "posx.encodings.alibi.ALiBi"}
    assert cfg.chosen.task.name == "copy" and "hydra" not in cfg


def test_compose_errors_are_one_line():
    with pytest.raises(ConfigError, match="unknown encoding 'rpoe'|Could not find 'encoding/rpoe'"):
        posx.compose("encoding=rpoe")


def test_a_config_that_cannot_train_leaves_no_run_directory(tmp_path):
    cfg = posx.compose("encoding=rope", "model.d_model=12", "model.n_heads=4", f"root={tmp_path}")
    with pytest.raises(ConfigError, match="rotary"):
        posx.train(cfg)
    assert list(tmp_path.iterdir()) == []


# --- a run of the user's own encoding, trained from Python (issue 35, item 15) ---------------

ENCODING = '''
from posx.encodings.base import PositionalEncoding


class Mine(PositionalEncoding):
    """NoPE under another name: a stand-in for a user's own encoding."""
'''
TINY = ("task=copy", "model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.d_ff=32",
        "train.length=8", "train.steps=2", "train.batch_size=4", "train.warmup_steps=1",
        "train.progress=false", "eval.lengths=[8]", "eval.tokens=64")  # fmt: skip


@pytest.fixture(scope="module")
def user_run(tmp_path_factory) -> tuple[Path, Path]:
    """``(run, conf)``: a run trained with ``posx.compose(config_dirs=[conf])``, where
    ``conf/encoding/mine_api.yaml`` names a class of the user's package ``posxapi_pkg``."""
    folder = tmp_path_factory.mktemp("api_user")
    (folder / "posxapi_pkg").mkdir()
    (folder / "posxapi_pkg" / "__init__.py").write_text("")
    (folder / "posxapi_pkg" / "enc.py").write_text(ENCODING)
    (folder / "conf" / "encoding").mkdir(parents=True)
    yaml = "# Mine (posxapi_pkg).\n_target_: posxapi_pkg.enc.Mine\n"
    (folder / "conf" / "encoding" / "mine_api.yaml").write_text(yaml)
    sys.path.insert(0, str(folder))
    cfg = posx.compose(
        "encoding=mine_api", *TINY, f"root={folder / 'results'}", config_dirs=[folder / "conf"]
    )
    return posx.train(cfg), folder / "conf"


@pytest.fixture
def no_env_trust(monkeypatch):
    for var in ("POSX_TRUST", "POSX_CONFIG_PATH", "POSX_CONFIG_DIR"):
        monkeypatch.delenv(var, raising=False)


def test_evaluate_trusts_the_config_dirs_the_run_was_composed_with(user_run, no_env_trust):
    run, _ = user_run
    rows = posx.evaluate(run, [8, 16])
    assert list(rows["eval_length"]) == [8, 16] and set(rows["encoding"]) == {"mine_api"}


def test_evaluate_takes_config_dirs_as_the_cli_does(user_run, no_env_trust):
    run, conf = user_run
    assert list(posx.evaluate(run, [8], config_dirs=[conf])["status"]) == ["ok"]


def test_evaluate_says_how_to_trust_in_python(user_run, no_env_trust):
    from posx.config.trust import UntrustedTarget

    run, _ = user_run
    with pytest.raises(UntrustedTarget) as refused:
        posx.evaluate(run, [8], config_dirs=[])  # none: nothing of the user's is trusted
    line = str(refused.value)
    assert "trust=['posxapi_pkg']" in line and "--trust" not in line, line
    assert list(posx.evaluate(run, [8], config_dirs=[], trust=["posxapi_pkg"])["status"]) == ["ok"]


def test_the_cli_still_says_trust_flag(user_run, no_env_trust, cli):
    run, _ = user_run
    line = cli("eval", str(run), "--lengths", "8", "--no-progress").stderr.strip().splitlines()[-1]
    assert "pass --trust posxapi_pkg or set POSX_TRUST=posxapi_pkg" in line, line


@pytest.mark.filterwarnings("ignore:posx report")  # "no plot" of positions: one bucket
def test_report_returns_the_table_and_writes_plots_and_html(user_run, tmp_path):
    run, _ = user_run
    table = posx.report(run.parent.parent, plot_dir=tmp_path / "plots", html=tmp_path / "r.html")
    assert isinstance(table, pd.DataFrame) and set(table["encoding"]) == {"mine_api"}
    assert sorted(table["eval_length"].unique())[0] == 8
    assert any(p.suffix == ".png" for p in (tmp_path / "plots").iterdir())
    assert "mine_api" in (tmp_path / "r.html").read_text()


def test_report_is_callable_after_its_package_is_imported():
    """``posx.report`` names both the function and the package ``posx.report``: importing
    the package (as posx.api itself does) must not hide the function, and the package's
    submodules stay importable under their names."""
    code = (
        "import posx\n"
        "first = posx.report\n"
        "import posx.report.build as build, posx.report.output as out\n"
        "assert callable(posx.report) and callable(first) and build.make_report and out.render\n"
        "from posx import report\n"
        "assert callable(report) and 'report' in dir(posx)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_evaluate_takes_eval_lengths_as_lengths_as_the_cli_does(user_run, no_env_trust):
    """``eval.lengths=[...]`` means the lengths to evaluate, not a setting recorded per row."""
    run, _ = user_run
    rows = posx.evaluate(run, overrides=["eval.lengths=[8,24]"])
    assert list(rows["eval_length"]) == [8, 24]
    assert set(rows["overrides"].fillna("")) == {""}


def test_structured_positions_on_text_are_refused_in_the_clis_words(tmp_path):
    """posx.train named the task as the dict posx.compose records ({'name': ..., 'target': ...})."""
    import posx
    from posx.errors import ConfigError

    cfg = posx.compose("task=text", "positions=coupling", "train.steps=1", f"root={tmp_path}")
    with pytest.raises(ConfigError, match=r"and task TextTask has no numbers to read \(only"):
        posx.train(cfg)
    assert not (tmp_path / "runs").exists()
