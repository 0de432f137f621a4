"""Config composition and validation: bad values fail early with one clear ConfigError."""

from __future__ import annotations

import subprocess
import sys

import pytest

from posx.config.compose import compose, eval_lengths
from posx.config.paths import choices
from posx.config.validate import positive_lengths, validate
from posx.errors import ConfigError
from posx.runs import check_overrides, preflight
from posx.runs.launch import sweep_dir_of


def composed(*overrides: str):
    cfg = compose(list(overrides))
    validate(cfg)
    return cfg


def test_default_config_is_valid():
    cfg = composed()
    assert cfg.encoding._target_
    assert cfg.task._target_


@pytest.mark.parametrize("name", choices("encoding"))
def test_every_encoding_composes_and_validates(name):
    cfg = composed(f"encoding={name}")
    assert "_target_" in cfg.encoding


def test_d_model_not_divisible_by_heads_names_both():
    with pytest.raises(ConfigError) as err:
        composed("model.d_model=30", "model.n_heads=4")
    msg = str(err.value)
    assert "d_model" in msg and "n_heads" in msg
    assert "30" in msg and "4" in msg


@pytest.mark.parametrize("value", [0, -5])
def test_non_positive_train_length(value):
    with pytest.raises(ConfigError, match="train.length"):
        composed(f"train.length={value}")


@pytest.mark.parametrize("name", ["d_model", "n_layers", "n_heads", "d_ff", "attn_block_size"])
def test_non_positive_model_sizes(name):
    with pytest.raises(ConfigError, match=f"model.{name}"):
        composed(f"model.{name}=0")


@pytest.mark.parametrize("lengths", ["[128,64]", "[0,64]", "[64,64]", "[-64,128]", "[]"], ids=str)
def test_bad_eval_lengths(lengths):
    with pytest.raises(ConfigError, match="eval.lengths"):
        composed(f"eval.lengths={lengths}")


def test_good_eval_lengths():
    assert list(composed("eval.lengths=[16,32,64]").eval.lengths) == [16, 32, 64]


def test_positive_lengths_rejects_bools_and_floats():
    with pytest.raises(ConfigError):
        positive_lengths([True, 2], "x")
    with pytest.raises(ConfigError):
        positive_lengths([1.5], "x")
    assert positive_lengths([1, 2, 3], "x") == [1, 2, 3]


def test_misspelled_key_is_a_config_error():
    with pytest.raises(ConfigError, match="d_modle"):
        compose(["model.d_modle=3"])


def test_wrong_type_is_a_config_error():
    with pytest.raises(ConfigError, match="d_model"):
        compose(["model.d_model=wide"])


def test_unknown_encoding_lists_choices():
    with pytest.raises(ConfigError) as err:
        check_overrides(["encoding=nosuch"])
    msg = str(err.value)
    assert "nosuch" in msg
    for name in ("alibi", "rope", "nope", "t5"):
        assert name in msg


def test_unknown_encoding_in_a_sweep_is_caught():
    with pytest.raises(ConfigError, match="nosuch"):
        check_overrides(["encoding=rope,nosuch"], build=False)


def test_check_overrides_accepts_a_valid_sweep(monkeypatch):
    """Every value of the sweep is composed with the other overrides, validated and built."""
    checked, built = [], []
    check, build = preflight.check_config, preflight.check_buildable
    monkeypatch.setattr(
        preflight, "check_config", lambda cfg, *a: checked.append(cfg) or check(cfg, *a)
    )
    monkeypatch.setattr(
        preflight, "check_buildable", lambda cfg, *a: built.append(cfg) or build(cfg, *a)
    )
    check_overrides(
        ["encoding=nope,alibi", "task=copy", "train.length=16", "model.d_model=32"], build=True
    )
    seen = sorted(
        (c.encoding._target_, c.task._target_, c.train.length, c.model.d_model) for c in checked
    )
    assert seen == [
        ("posx.encodings.alibi.ALiBi", "posx.tasks.synthetic.copy.CopyTask", 16, 32),
        ("posx.encodings.base.NoPE", "posx.tasks.synthetic.copy.CopyTask", 16, 32),
    ]
    assert built == checked


def test_bad_override_syntax_is_a_config_error():
    with pytest.raises(ConfigError):
        check_overrides(["model.d_model=[1,"])


def test_encoding_that_cannot_fit_the_model_is_a_config_error():
    # head_dim = 12 / 4 = 3: RoPE cannot rotate an odd number of dimensions.
    with pytest.raises(ConfigError, match="rotary"):
        check_overrides(["encoding=rope", "model.d_model=12", "model.n_heads=4"])


def test_importing_posx_has_no_side_effects():
    """No module registers Hydra configs or resolvers, or sets environment variables, on
    import: composing does that when it is asked to."""
    code = (
        "import os, pkgutil, importlib, posx\n"
        "before = dict(os.environ)\n"
        "for m in pkgutil.walk_packages(posx.__path__, 'posx.'):\n"
        # a tracker backend imports its optional library (mlflow sets a telemetry variable);
        # it is loaded only when a run selects that logger
        "    if m.name == 'posx.__main__' or m.name.count('.') == 2 and m.name.startswith(\n"
        "        'posx.tracking.') and m.name != 'posx.tracking.base': continue\n"
        "    importlib.import_module(m.name)\n"
        "from omegaconf import OmegaConf\n"
        "from hydra.core.config_store import ConfigStore\n"
        "assert not OmegaConf.has_resolver('posx_run_name')\n"
        "assert 'posx_schema.yaml' not in ConfigStore.instance().repo\n"
        "assert dict(os.environ) == before\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_invocation_names_the_run_directory_through_the_config(tmp_path):
    """Launcher workers agree on the run/sweep directory because it is an override."""
    cfg = compose(["invocation=20260101-000000_abcdef", f"root={tmp_path}"])
    assert cfg.invocation == "20260101-000000_abcdef"
    hydra_cfg = sweep_dir_of(["invocation=20260101-000000_abcdef", f"root={tmp_path}", "seed=0,1"])
    assert hydra_cfg == tmp_path / "sweeps" / "20260101-000000_abcdef"


@pytest.mark.parametrize("length", [16, 32, 100])
def test_default_eval_lengths_follow_the_training_length(length):
    """Without eval.lengths a run is evaluated at 1x, 2x, 4x and 8x its training length, so the
    table always has an in-distribution column (and a ratio)."""
    cfg = compose([f"train.length={length}"])
    assert eval_lengths(cfg) == [length, 2 * length, 4 * length, 8 * length]
    assert eval_lengths(compose([f"train.length={length}", "eval.lengths=[7,9]"])) == [7, 9]
