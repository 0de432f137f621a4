"""report/chance.py: the at-chance margin as its docstring states it (issue 30, item 8), and the
cell rule the report and ``posx check`` share (item 3)."""

from __future__ import annotations

import doctest
import math

import pandas as pd
import pytest

from posx.report import chance
from posx.report.chance import ABOVE_CHANCE, above_chance, cell_at_chance


def margins(level: float, sequences: float | None, metric: str = "exact_match") -> pd.Series:
    """``above_chance``'s rows for one exact-match value at a chance level, with ``sequences``
    scored (None: the column was not recorded)."""
    row = {"task": "t", "metric": metric, "value": level, "chance": level}
    if sequences is not None:
        row["sequences"] = sequences
    return above_chance(pd.DataFrame([row]))


@pytest.mark.parametrize(
    ("level", "n", "margin"),
    [
        (0.0, 1000, 3 / 1000),  # chance 0: the rule of three, not 0
        (0.0, 10, 0.3),
        (0.5, 1000, 2 * math.sqrt(0.5 / (0.5 * 1000))),  # two standard errors > 3/n
        (0.9, 100, 2 * math.sqrt(0.9 / (0.1 * 100))),
        (0.001, 1000, 3 / 1000),  # two standard errors (0.002) < 3/n
    ],
)
def test_the_margin_is_two_standard_errors_of_chance_and_at_least_three_over_n(level, n, margin):
    assert margins(level, n)["margin"].iloc[0] == pytest.approx(margin)


def test_the_margin_at_chance_zero_is_three_over_n_so_lucky_sequences_stay_at_chance():
    out = margins(0.0, 1000)
    assert out["margin"].iloc[0] == pytest.approx(0.003) and out["margin"].iloc[0] > 0
    out = above_chance(pd.DataFrame([{"task": "t", "metric": "exact_match", "value": 0.002,
                                      "chance": 0.0, "sequences": 1000}]))  # fmt: skip
    assert cell_at_chance(ABOVE_CHANCE, out["value"].iloc[0], out["margin"].iloc[0])


def test_without_a_sequence_count_and_for_other_metrics_the_margin_is_zero():
    assert margins(0.0, None)["margin"].iloc[0] == 0.0
    assert margins(0.5, None)["margin"].iloc[0] == 0.0
    assert margins(0.5, 1000, metric="acc")["margin"].iloc[0] == 0.0


@pytest.mark.parametrize(
    ("metric", "mean", "margin", "expected"),
    [
        ("exact_match", 0.0, 0.0, True),  # zero is at chance
        ("exact_match", 0.003, 0.003, True),  # within the margin
        ("exact_match", 0.004, 0.003, False),
        (ABOVE_CHANCE, -0.1, 0.06, True),  # below chance is no better than chance
        ("acc", 0.0, 0.0, True),
        ("acc", 0.2, 0.0, False),
        ("bpb", 0.0, 0.0, False),  # a loss has no chance level
        ("exact_match", math.nan, 0.0, False),  # no value: missing, not at chance
    ],
)
def test_a_cell_is_at_chance_when_its_accuracy_lies_within_the_margin(
    metric, mean, margin, expected
):
    assert cell_at_chance(metric, mean, margin) is expected


def test_the_module_docstring_states_what_the_code_does():
    """The docstring's margin rule is an example doctest runs, so the two cannot drift apart."""
    result = doctest.testmod(chance, verbose=False)
    assert result.attempted >= 1 and result.failed == 0
    assert "exactly 0 where chance is 0" not in (chance.__doc__ or "")
