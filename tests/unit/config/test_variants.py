"""Short variant labels and what `--variant` accepts."""

from __future__ import annotations

import pandas as pd
import pytest

from posx.config.variant_names import matches, short_label
from posx.errors import ConfigError
from posx.report.data import normalize, select

YARN = "encoding.scaling.factor=4.0 encoding.scaling.type=yarn"


@pytest.mark.parametrize(
    ("encoding", "overrides", "label"),
    [
        ("rope", "", "rope"),
        ("rope", YARN, "rope+yarn×4"),
        ("rope", "encoding.scaling.factor=8 encoding.scaling.type=ntk", "rope+ntk×8"),
        ("rope", "encoding.scaling.factor=2.5 encoding.scaling.type=linear", "rope+linear×2.5"),
        ("rope", f"{YARN} encoding.scaling.beta_fast=16", "rope+yarn×4+beta_fast=16"),
        ("rope", "encoding.scaling.type=rerope", "rope+rerope"),
        ("rope", "encoding.base=40000.0", "rope+base=40000"),
        ("alibi", "eval.seed=7", "alibi+eval.seed=7"),
        ("rope+randomized", YARN, "rope+randomized+yarn×4"),
    ],
)
def test_short_label(encoding, overrides, label):
    assert short_label(encoding, overrides) == label


def test_variant_matches_labels_parts_and_tokens():
    label = "rope+yarn×4"
    for wanted in ("rope+yarn×4", "rope+yarnx4", "yarn", "yarn×4", "yarnx4", "rope+yarn", "all",
                   "encoding.scaling.type=yarn", YARN):  # fmt: skip
        assert matches(wanted, "rope", YARN, label), wanted
    for wanted in ("ntk", "yarn×8", "base", "rope", "encoding.scaling.type=ntk", "alibi+yarn"):
        assert not matches(wanted, "rope", YARN, label), wanted
    assert matches("base", "rope", "", "rope") and matches("rope", "rope", "", "rope")


def _rows(pairs):
    frame = pd.DataFrame(
        [{"encoding": e, "overrides": o, "task": "copy", "train_length": 16, "eval_length": 16,
          "seed": 0, "mode": "full", "status": "ok", "loss": 1.0} for e, o in pairs]
    )  # fmt: skip
    return normalize(frame)


def test_report_variants_are_short_and_selectable():
    rows = _rows([("rope", ""), ("rope", YARN), ("rope", "encoding.scaling.factor=8 "
                  "encoding.scaling.type=ntk")])  # fmt: skip
    assert list(rows["variant"]) == ["rope", "rope+yarn×4", "rope+ntk×8"]
    assert list(select(rows, variants=["yarn"])["variant"]) == ["rope+yarn×4"]
    assert list(select(rows, variants=["rope+ntkx8"])["variant"]) == ["rope+ntk×8"]
    assert list(select(rows, variants=["base", "ntk"])["variant"]) == ["rope", "rope+ntk×8"]
    with pytest.raises(ConfigError, match=r"--variant 'llama3'; available: base, all, rope, "):
        select(rows, variants=["llama3"])


def test_colliding_short_labels_keep_the_full_overrides():
    # two different override sets that read the same when shortened are never merged
    a, b = "encoding.scaling.type=rerope encoding.window=8", "encoding.scaling.type=rerope "
    rows = _rows([("rope", a), ("rope", b + "encoding.scaling.window=8")])
    assert rows["variant"].nunique() == 2 and all("[" in v for v in rows["variant"])
