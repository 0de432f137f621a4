"""``eval.variants``: eval-time variants a config asks for, evaluated after training, each
recorded with its overrides as ``posx eval RUN KEY=VALUE`` records them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from posx.claims.find import run_experiment
from posx.config.compose import compose
from posx.config.validate import check_variant_lists, validate
from posx.errors import ConfigError
from posx.runs.variants import check_variants

TINY = ["task=copy", "model.d_model=16", "model.n_layers=1", "model.d_ff=32", "train.length=16",
        "train.steps=2", "train.batch_size=4", "train.warmup_steps=1", "train.progress=false",
        "eval.lengths=[16,32]", "eval.tokens=128"]  # fmt: skip
YARN = ["encoding.scaling.type=yarn", "encoding.scaling.factor=2"]
LINEAR = ["encoding.scaling.type=linear", "encoding.scaling.factor=2"]


def test_a_run_evaluates_its_variants_after_training(tmp_path: Path):
    from posx.runs import run_train

    # on the command line an override inside a list is quoted (Hydra's grammar)
    variants = ",".join("[" + ",".join(f"'{o}'" for o in v) + "]" for v in (YARN, LINEAR))
    run_train([*TINY, f"root={tmp_path}", f"hydra.run.dir={tmp_path}/run",
               f"eval.variants=[{variants}]", "experiment_name=mine"])  # fmt: skip
    assert run_experiment(tmp_path / "run") == "mine"  # run.json names the preset
    rows = pd.read_csv(tmp_path / "run" / "eval.csv", keep_default_na=False)
    assert sorted(set(rows["overrides"])) == ["", " ".join(sorted(LINEAR)), " ".join(sorted(YARN))]
    assert len(rows) == 6 and set(rows["status"]) == {"ok"}
    # a variant changes the numbers at 2x (the same weights, another encoding)
    at32 = rows[rows["eval_length"] == 32].set_index("overrides")["loss"]
    assert at32[""] != at32[" ".join(sorted(YARN))]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (["encoding.scaling.type=yarn"], "must be lists of key=value"),
        ([[]], "must be lists of key=value"),
        ([["nokey"]], "must be a key=value override"),
        ([["eval.variants=[]"]], "not of eval.variants"),
    ],
)
def test_bad_variants_are_one_line_errors(value: list, text: str):
    with pytest.raises(ConfigError, match=text):
        check_variant_lists(value)
    cfg = compose(TINY)  # validate checks them
    if value and isinstance(value[0], list):
        cfg.eval.variants = value
        with pytest.raises(ConfigError, match=text):
            validate(cfg)


def test_a_variant_the_encoding_refuses_fails_before_training():
    cfg = compose([*TINY, "eval.variants=[['encoding.scaling.type=nosuch']]"])
    validate(cfg)
    with pytest.raises(ConfigError, match=r"eval.variants \['encoding.scaling.type=nosuch'\]"):
        check_variants(cfg)


def test_the_rope_scaling_preset_asks_for_six_buildable_variants():
    cfg = compose(["experiment=rope_scaling"])
    check_variants(cfg)
    assert len(cfg.eval.variants) == 6 and cfg.experiment_name == "rope_scaling"
