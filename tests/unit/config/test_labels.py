"""Run labels: the yaml's name, the class of a `_target_` set over it, or the user's `label=`;
never the name of the option something replaced. The run directory (Hydra's `hydra.run.dir`)
and `run.json` (:func:`run_names`) use the same labels."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from posx.config.build import build_encoding
from posx.config.compose import compose
from posx.config.run_names import chosen_options, run_names
from posx.config.validate import validate
from posx.errors import ConfigError

ALIBI = "posx.encodings.alibi.ALiBi"


def labelled(*overrides: str) -> tuple[str, dict[str, str]]:
    """The run directory's name (without the invocation) and run.json's labels."""
    cfg = compose(["task=copy", *overrides, "invocation=X"], [], hydra_node=True)
    HydraConfig.instance().set_config(cfg)
    names = run_names(cfg, chosen_options(cfg.hydra.runtime.choices, []))
    return Path(OmegaConf.select(cfg, "hydra.run.dir")).name.removesuffix("_X"), names


def test_a_yaml_names_its_runs():
    assert labelled("encoding=alibi") == (
        "copy_alibi_L64_s0",
        {"encoding": "alibi", "task": "copy", "model": "tiny", "positions": "default"},
    )


def test_a_command_line_target_is_named_by_its_class_not_the_option_it_replaced():
    name, names = labelled(
        "encoding=nope", f"encoding._target_={ALIBI}", "+encoding._partial_=true"
    )
    assert name == "copy_ALiBi_L64_s0" and names["encoding"] == "ALiBi"


def test_a_task_target_is_named_by_its_class():
    name, names = labelled("task._target_=posx.tasks.synthetic.reverse.ReverseTask")
    assert name == "ReverseTask_rope_L64_s0" and names["task"] == "ReverseTask"


def test_the_same_target_as_the_yaml_keeps_the_yaml_name():
    assert labelled("encoding=alibi", f"encoding._target_={ALIBI}")[0] == "copy_alibi_L64_s0"


def test_an_explicit_label_names_the_run_and_keeps_the_positions_suffix():
    name, names = labelled("encoding=alibi", "label=alibi-v2", "positions=randomized")
    assert name == "copy_alibi-v2+randomized_L64_s0" and names["encoding"] == "alibi-v2"


@pytest.mark.parametrize("label", ["../up", "a b", "-x"])
def test_a_label_that_is_no_directory_name_is_refused(label):
    with pytest.raises(ConfigError, match="label must be letters, digits"):
        validate(compose([f"label='{label}'"], []))


def test_a_forgotten_partial_is_a_hint_not_a_missing_argument():
    cfg = compose(["encoding=nope", f"encoding._target_={ALIBI}"], [])
    with pytest.raises(ConfigError) as err:
        build_encoding(cfg)
    assert "needs n_heads from the model" in str(err.value)
    assert "add `_partial_: true` to its yaml" in str(err.value)
