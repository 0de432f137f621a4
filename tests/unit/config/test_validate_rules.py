"""``validate``'s one-line messages for rules the model owns, and the check ``posx eval`` and
``posx resume`` share before building a run's config."""

from __future__ import annotations

from pathlib import Path

import pytest

import posx.saved.run as saved_run
from posx.config.compose import compose
from posx.config.validate import validate
from posx.errors import ConfigError
from posx.saved import SavedRun


def test_heads_that_do_not_divide_the_width_keep_the_config_message():
    cfg = compose(["model.d_model=30", "model.n_heads=4"])
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert str(err.value) == "model.d_model (30) must be divisible by model.n_heads (4)"


def test_an_unknown_attention_kernel_keeps_the_config_message():
    cfg = compose(["model.attention_kernel=x"])
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert str(err.value) == "model.attention_kernel must be one of auto, blocked, flex, got 'x'"


def test_checks_keep_their_order():
    """The first failing check is the error: model sizes before the training schedule, the
    schedule before precision, precision before the kernel, the kernel before the device."""
    cases = [
        (["model.d_model=30", "train.steps=0"], "model.d_model (30)"),
        (["model.n_heads=0", "model.d_model=30"], "model.n_heads must be positive"),
        (["train.steps=0", "train.precision=fp8"], "train.steps must be positive"),
        (["train.precision=fp8", "model.attention_kernel=x"], "train.precision must be one of"),
        (["model.attention_kernel=x", "train.device=tpu"], "model.attention_kernel must be"),
        (["train.device=tpu", "eval.tokens=0"], "train.device must be"),
        (["eval.tokens=0", "label=a/b"], "eval.tokens and eval.batch_tokens"),
    ]
    for overrides, start in cases:
        with pytest.raises(ConfigError) as err:
            validate(compose(overrides))
        assert str(err.value).startswith(start), (overrides, str(err.value))


def test_check_loadable_checks_trust_then_identity_naming_the_source(monkeypatch):
    calls = []
    monkeypatch.setattr(saved_run, "check_trusted", lambda *args: calls.append(("trust", *args)))
    monkeypatch.setattr(
        saved_run, "check_identity", lambda *args: calls.append(("identity", *args[:3]))
    )
    run, cfg = SavedRun(Path("RUN")), object()
    run.__dict__["trainer_state"] = {}  # its checkpoint's trainer.json, as if read already
    info = {"needs_trust": ["mypkg"]}
    run.check_loadable(cfg, run.path / ".hydra/config.yaml", ("x",), info)
    run.check_loadable(cfg, run.path / ".hydra/overrides.yaml", (), {}, composed=True)
    old = {"run": "r", "seed": 0}  # run.json of a run trained before needs_trust existed
    run.check_loadable(cfg, run.path / ".hydra/config.yaml", (), old)
    path = run.path
    assert calls == [
        ("trust", cfg, ("x",), "RUN/.hydra/config.yaml", ["mypkg"], False),
        ("identity", path, cfg, "RUN/.hydra/config.yaml"),
        ("trust", cfg, (), "RUN/.hydra/overrides.yaml", [], False),
        ("identity", path, cfg, "RUN/.hydra/overrides.yaml (composed with posx's configs)"),
        ("trust", cfg, (), "RUN/.hydra/config.yaml", [], True),
        ("identity", path, cfg, "RUN/.hydra/config.yaml"),
    ]
