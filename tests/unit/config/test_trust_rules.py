"""Which ``_target_`` entries a loaded run may build (posx.config.trust)."""

from __future__ import annotations

import sys

import pytest
from omegaconf import OmegaConf

from posx.config.trust import (
    check_trusted,
    config_targets,
    is_trusted,
    needs_trust,
    trusted_prefixes,
)
from posx.errors import ConfigError


@pytest.mark.parametrize(
    "target",
    ["posx.encodings.rope.RoPE", "posx.encodings.base.NoPE", "posx.tasks.synthetic.copy.CopyTask",
     "posx.positions.RandomizedPositions"],
)  # fmt: skip
def test_posx_classes_are_trusted(target):
    assert is_trusted(target)


@pytest.mark.parametrize(
    "target",
    [
        "posx.storage.results.atomic_write",  # a posx function that writes any file
        "posx.positions.step_positions",  # a posx function, not a class
        "posx.tasks.text.Path",  # pathlib.Path, reached through a posx module's attribute
        "posx.encodings.rope.torch.load",  # unpickles, reached the same way
        "posx.model.transformer.TransformerLM",  # a posx class, but not one a config builds
        "builtins.open",
        "torch.load",
        "",
        None,
        3,
    ],
)
def test_everything_else_is_not(target):
    try:
        assert not is_trusted(target)
    except ConfigError as err:  # a path that does not even load is refused as well
        assert "cannot be loaded" in str(err)


def test_user_prefixes_trust_code_defined_under_them():
    assert is_trusted("json.JSONDecoder", ("json",))  # defined in json.decoder: under json
    assert not is_trusted("json.codecs.open", ("json",))  # codecs.open, via an attribute
    assert not is_trusted("jsonx.Thing", ("json",))  # a prefix is a whole dotted component
    assert is_trusted("builtins.open", ("builtins.open",))  # an exact target, named by the user
    assert not is_trusted("builtins.print", ("builtins.open",))


def test_an_untrusted_module_is_never_imported(tmp_path, monkeypatch):
    marker = tmp_path / "imported"
    (tmp_path / "posx_evil_module.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = OmegaConf.create({"encoding": {"_target_": "posx_evil_module.Thing"}})
    with pytest.raises(ConfigError, match="'posx_evil_module.Thing' is not posx code"):
        check_trusted(cfg, ("other",), "config.yaml")
    assert not marker.exists() and "posx_evil_module" not in sys.modules


def test_targets_are_found_at_any_depth():
    cfg = OmegaConf.create(
        {
            "encoding": {"_target_": "a.B", "inner": {"_target_": "c.D"}},
            "task": {"items": [{"_target_": "e.F"}], "_target_": "posx.tasks.text.TextTask"},
        }
    )
    found = dict((t, w) for w, t in config_targets(cfg))
    assert found == {
        "a.B": "encoding",
        "c.D": "encoding.inner",
        "e.F": "task.items[0]",
        "posx.tasks.text.TextTask": "task",
    }
    assert needs_trust(cfg) == ["a", "c", "e"]


def test_message_names_the_target_and_how_to_allow_it():
    cfg = OmegaConf.create({"encoding": {"_target_": "mypkg.enc.Mine"}})
    with pytest.raises(ConfigError) as err:
        check_trusted(cfg, (), "RUN/.hydra/config.yaml", recorded=["mypkg"])
    text = str(err.value)
    assert text.startswith("RUN/.hydra/config.yaml: encoding _target_ 'mypkg.enc.Mine'")
    assert "needs --trust mypkg" in text and "POSX_TRUST=mypkg" in text and "\n" not in text
    with pytest.raises(ConfigError, match="'mypkg.enc.Mine' cannot be loaded: No module"):
        check_trusted(cfg, ("mypkg",), "RUN/.hydra/config.yaml")  # trusted, so it is imported
    trusted = OmegaConf.create({"encoding": {"_target_": "json.JSONDecoder"}})
    check_trusted(trusted, ("json",), "RUN/.hydra/config.yaml")  # no error


def test_trust_comes_from_options_and_the_environment(monkeypatch):
    monkeypatch.setenv("POSX_TRUST", " b.c ,, d ")
    assert trusted_prefixes(["a", "b.c"]) == ("a", "b.c", "d")
    monkeypatch.setenv("POSX_TRUST", "not valid")
    with pytest.raises(ConfigError, match="got 'not valid'"):
        trusted_prefixes()


def test_targets_in_the_users_config_dirs_are_trusted_exactly(tmp_path, monkeypatch):
    """A ``_target_`` the user wrote into their own config dir is trusted (that exact path, not
    its package); a dir the user did not name grants nothing."""
    monkeypatch.delenv("POSX_TRUST", raising=False)
    monkeypatch.delenv("POSX_CONFIG_PATH", raising=False)
    mine = tmp_path / "mine"
    (mine / "encoding").mkdir(parents=True)
    (mine / "encoding" / "dec.yaml").write_text("_target_: json.JSONDecoder\n")
    cfg = OmegaConf.create({"encoding": {"_target_": "json.JSONDecoder"}})
    assert trusted_prefixes(["a"], [mine]) == ("a", "json.JSONDecoder")
    check_trusted(cfg, trusted_prefixes(dirs=[mine]), "RUN/.hydra/config.yaml")  # no error
    assert not is_trusted("json.JSONEncoder", trusted_prefixes(dirs=[mine]))
    with pytest.raises(ConfigError, match="'json.JSONDecoder' is not posx code"):
        check_trusted(cfg, trusted_prefixes(dirs=[]), "RUN/.hydra/config.yaml")


def test_eval_time_overrides_are_the_users_own():
    cfg = OmegaConf.create({"encoding": {"_target_": "mypkg.enc.Mine"}})
    with pytest.raises(ConfigError) as err:
        check_trusted(cfg, (), "eval-time overrides", recorded=None)
    assert str(err.value) == (
        "eval-time overrides: encoding _target_ 'mypkg.enc.Mine' is not posx code; if you trust "
        "it, pass --trust mypkg.enc.Mine or set POSX_TRUST=mypkg.enc.Mine"
    )


def test_a_run_from_before_needs_trust_is_not_called_edited():
    """A run trained before run.json recorded ``needs_trust`` records nothing: the message says
    so and what to do, instead of asking whether the config was edited."""
    cfg = OmegaConf.create({"encoding": {"_target_": "mypkg.enc.Mine"}})
    with pytest.raises(ConfigError) as err:
        check_trusted(cfg, (), "RUN/.hydra/config.yaml", recorded=[], unrecorded=True)
    text = str(err.value)
    assert "edited" not in text and "\n" not in text
    assert "trained before posx recorded what a run needs trusted" in text, text
    assert "pass --trust mypkg.enc.Mine" in text and "POSX_TRUST=mypkg.enc.Mine" in text
    with pytest.raises(ConfigError, match=r"did not record it \(was the config edited\?\)"):
        check_trusted(cfg, (), "RUN/.hydra/config.yaml", recorded=[])  # it recorded: none
