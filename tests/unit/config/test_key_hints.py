"""``key_hint``: what a config has where a key is missing, in posx's words (issue 35.3)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from posx.config.compose import compose
from posx.config.hints import key_hint


def test_a_class_built_node_names_its_class_what_it_takes_and_who_has_the_key():
    """`encoding.scaling.type=yarn` on ALiBi: the missing part is `scaling`, under a node that
    ALiBi builds; it takes nothing of its own (n_heads comes from the model), and rope's yaml
    is the one with `scaling`. Before: "" (the parent `encoding.scaling` does not exist)."""
    alibi = compose(["encoding=alibi"])
    assert key_hint(alibi, "encoding.scaling.type") == (
        "; encoding (posx.encodings.alibi.ALiBi) has no setting 'scaling'; encoding keys: none "
        "(n_heads comes from the model); encoding options with 'scaling': rope"
    )
    rope = compose(["encoding=rope"])
    assert key_hint(rope, "encoding.bse") == (
        "; encoding (posx.encodings.rope.RoPE) has no setting 'bse'; did you mean "
        "'encoding.base'? encoding keys: base, rotary_fraction, scaling (head_dim, train_length "
        "come from the model)"
    )


def test_typed_nodes_keep_the_short_form():
    cfg = compose([])
    hint = key_hint(cfg, "model.d_modle")
    assert hint.startswith("; did you mean 'model.d_model'? model keys: d_model, n_layers")
    assert key_hint(cfg, "train.steps.x") == ""  # under a value, not a node


def test_a_class_that_is_not_loaded_yet_is_not_imported(tmp_path: Path, monkeypatch):
    """A run directory's _target_ must not run code (posx.config.trust): the hint lists the
    config's keys instead of importing the class to read its signature."""
    (tmp_path / "hint_probe_mod.py").write_text(
        f"open({str(tmp_path / 'imported')!r}, 'w').close()\nclass Enc:\n"
        "    def __init__(self, width=1): pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = OmegaConf.create({"encoding": {"_target_": "hint_probe_mod.Enc", "scale": 2}})
    assert key_hint(cfg, "encoding.widht") == (
        "; encoding (hint_probe_mod.Enc) has no setting 'widht'; encoding keys: scale"
    )
    assert not (tmp_path / "imported").exists() and "hint_probe_mod" not in sys.modules


@pytest.mark.parametrize("key", ["nosuch", "+nosuch"])
def test_top_level(key):
    assert key_hint(compose([]), key).startswith("; top-level keys: model, train, eval")
