"""The user's config dirs are added beside the built-in configs: listed, validated, composed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from posx.config.compose import check_group_value, compose
from posx.config.paths import (
    CONFIG_DIR,
    choices,
    describe_option,
    user_config_dirs,
    user_config_targets,
)
from posx.config.validate import validate
from posx.errors import ConfigError
from posx.runs import check_overrides

TINY = ["task=copy", "model.d_model=32", "model.n_heads=4", "train.length=16"]


def user_dir(root: Path, group: str, name: str, text: str) -> Path:
    path = root / group / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return root


@pytest.fixture
def mine(tmp_path: Path) -> Path:
    text = "# Mine: ALiBi by another name.\n_target_: posx.encodings.alibi.ALiBi\n_partial_: true\n"
    return user_dir(tmp_path / "conf", "encoding", "mine", text)


@pytest.fixture(autouse=True)
def _no_env_path(monkeypatch):
    for var in ("POSX_CONFIG_PATH", "POSX_CONFIG_DIR"):
        monkeypatch.delenv(var, raising=False)


def test_builtin_configs_are_found_in_the_source_tree():
    assert (CONFIG_DIR / "config.yaml").is_file() and (CONFIG_DIR / "encoding").is_dir()


def test_user_encoding_is_added_beside_the_builtin_ones(mine):
    dirs = user_config_dirs([mine])
    names = choices("encoding", dirs)
    assert "mine" in names and "rope" in names and "alibi" in names
    assert describe_option("encoding", "mine", dirs) == "Mine: ALiBi by another name."
    check_group_value("encoding", "mine", dirs)
    cfg = compose(["encoding=mine", *TINY], dirs)
    validate(cfg)
    assert cfg.encoding._target_ == "posx.encodings.alibi.ALiBi"
    check_overrides(["encoding=mine,rope", *TINY], dirs=dirs)  # validated and built as any other


def test_without_the_dir_the_option_is_unknown_and_named_so(mine):
    with pytest.raises(ConfigError, match="unknown encoding 'mine'; choose from: abacus, alibi"):
        check_group_value("encoding", "mine", [])


def test_config_path_env_holds_several_dirs_first_wins(tmp_path, mine, monkeypatch):
    other = user_dir(tmp_path / "other", "task", "mytask", "_target_: posx.tasks.x.T\n")
    user_dir(other, "encoding", "mine", "_target_: somewhere.Else\n")
    monkeypatch.setenv("POSX_CONFIG_PATH", os.pathsep.join([str(mine), str(other)]))
    assert user_config_dirs() == [mine.resolve(), other.resolve()]
    assert "mine" in choices("encoding") and "mytask" in choices("task")
    assert compose(["encoding=mine"]).encoding._target_ == "posx.encodings.alibi.ALiBi"


def test_old_config_dir_variable_adds_instead_of_replacing(mine, monkeypatch):
    monkeypatch.setenv("POSX_CONFIG_DIR", str(mine))
    assert {"mine", "rope"} <= set(choices("encoding"))


def test_hydra_searchpath_override_adds_a_dir_too(mine):
    cfg = compose([f"hydra.searchpath=[file://{mine}]", "encoding=mine"])
    assert cfg.encoding._target_ == "posx.encodings.alibi.ALiBi"


def test_a_user_option_may_not_take_a_builtin_name(tmp_path):
    conf = user_dir(tmp_path / "conf", "encoding", "rope", "_target_: mypkg.Rope\n")
    with pytest.raises(ConfigError, match=r"encoding/rope.yaml has the name of a built-in"):
        user_config_dirs([conf])


@pytest.mark.parametrize("sub", ["missing", "encoding"])
def test_a_dir_that_is_not_a_config_dir_is_one_line(mine, sub):
    with pytest.raises(ConfigError, match=f"config dir .*{sub} \\(from --config-dir\\)"):
        user_config_dirs([mine / sub])


def test_user_config_targets_lists_every_target_in_the_users_yamls(mine):
    user_dir(mine, "task", "t", "_target_: mypkg.tasks.T\nsub:\n  _target_: mypkg.Inner\n")
    user_dir(mine, "experiment", "e", "# @package _global_\nencoding:\n  _target_: mypkg.E\n")
    assert user_config_targets([mine]) == {
        "posx.encodings.alibi.ALiBi",
        "mypkg.tasks.T",
        "mypkg.Inner",
        "mypkg.E",
    }


def run_dir_of(overrides: list[str], dirs=None) -> str:
    cfg = compose([*overrides, "invocation=X"], dirs, hydra_node=True)
    HydraConfig.instance().set_config(cfg)
    return Path(OmegaConf.select(cfg, "hydra.run.dir")).name


def test_a_user_option_names_its_runs(mine):
    assert run_dir_of(["encoding=mine", "task=copy"], user_config_dirs([mine])) == (
        "copy_mine_L64_s0_X"
    )
