"""The Python API: `import posx` stays light; posx.compose records what names a run; a config
that cannot train leaves nothing behind. (Training itself: tests/integration/test_readme_api.py.)"""

from __future__ import annotations

import subprocess
import sys

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
