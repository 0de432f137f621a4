"""A claim reads the number the report prints for the same cell, with the report's guards
(issue 30, item 3): exact match above chance and its ×r, the at-chance guard on every
accuracy-like term (×r and ``by acc`` included), and rows the report marks ``not learned``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from posx.claims.check import FAILS, HOLDS, INCONCLUSIVE, Verdict
from posx.claims.find import check_root
from posx.report import make_report
from tests.unit.claims.test_claims_check import write_claims
from tests.unit.report.report_trees import make_seed_tree

SEQUENCES = 1000  # sequences scored per row: the at-chance margin is 3/n or two std errors


def record_chance(root: Path, chance: dict[str, float], acc: bool = False) -> None:
    """Adds what the evaluator records to every eval.csv under ``root``: the task's chance level
    and the number of sequences (and token accuracy equal to exact match when ``acc``)."""
    for path in root.rglob("eval.csv"):
        frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
        frame["chance"] = frame["task"].map(chance)
        frame["sequences"] = SEQUENCES
        if acc:
            frame["acc"] = frame["exact_match"]
        frame.to_csv(path, index=False)


def verdicts(root: Path, claims: dict[str, tuple[str, str]]) -> dict[str, Verdict]:
    write_claims(root / "conf", "syn", claims)
    checked = check_root(root / "results", [root / "conf"])
    return {v.claim.id: v for v in checked.verdicts}


def report_cell(root: Path, task: str, variant: str, length: int) -> pd.Series:
    """The report's summary row (mean, ratio_mean, ...) of one cell, as ``posx report`` shows it."""
    summary = make_report(root / "results").summary
    cell = summary[
        (summary["task"] == task)
        & (summary["variant"] == variant)
        & (summary["eval_length"] == length)
    ]
    assert len(cell) == 1
    return cell.iloc[0]


# Parity (chance 0.5): rope learned it (exact match 1.0 at 16) and keeps 0.6 at 64, i.e. 0.2
# above chance; raw ×r 0.6 reads as "keeps 60%", the report's ×r is 0.2.
PARITY = {"rope": [[1.0, 0.8, 0.60], [1.0, 0.8, 0.61], [1.0, 0.8, 0.59]]}
# As the issue ran it: at 64 rope is 0.0035 above chance (×0.007), within the margin.
PARITY_AT_CHANCE = {"rope": [[1.0, 0.8, 0.5035]] * 3}
# Copy (chance 0): both learned at 16 and both at zero at 64.
COPY_ZERO = {"rope": [[1.0, 0.3, 0.0]] * 3, "alibi": [[1.0, 0.5, 0.0]] * 3}


def test_ratio_on_parity_is_the_reports_above_chance_ratio(tmp_path: Path):
    make_seed_tree(tmp_path / "results", PARITY, "syn", task="parity")
    record_chance(tmp_path / "results", {"parity": 0.5})
    got = verdicts(tmp_path, {"keeps": ("rope ×r >= 0.45 at 4x", FAILS)})["keeps"]
    cell = report_cell(tmp_path, "parity", "rope", 64)
    assert cell["ratio_mean"] == pytest.approx(0.2)
    (measured,) = got.measured
    assert measured.mean == pytest.approx(cell["ratio_mean"])  # not the raw 0.6
    assert sorted(measured.seeds.values()) == pytest.approx([0.18, 0.2, 0.22])
    assert got.verdict == FAILS, (got.reason, got.statistic())


def test_issue_example_on_parity_at_chance_is_no_pass(tmp_path: Path):
    """`rope ×r >= 0.45 at 4x` gave ✓ with ×r 0.503 where the report shows ×0.007. rope learned
    parity (1.0 at 16), so its ×0.007 at 64 is a measurement (issue 45): ✗, not a pass."""
    make_seed_tree(tmp_path / "results", PARITY_AT_CHANCE, "syn", task="parity")
    record_chance(tmp_path / "results", {"parity": 0.5})
    got = verdicts(tmp_path, {"keeps": ("rope ×r >= 0.45 at 4x", FAILS)})["keeps"]
    cell = report_cell(tmp_path, "parity", "rope", 64)
    assert got.measured[0].mean == pytest.approx(cell["ratio_mean"]) == pytest.approx(0.007)
    assert got.verdict == FAILS, (got.reason, got.statistic())


# Arithmetic as the papers find it: rope learned the task in distribution (1.0 at 8 digits) and
# is at 0 at 2x; nope never learned it (0 at 8 digits, so 0 everywhere).
ARITHMETIC = {"rope": [[1.0, 0.0]] * 3, "nope": [[0.0, 0.0]] * 3}


@pytest.mark.parametrize(
    ("statement", "expected", "why"),
    [
        ("rope <= 0.1 at 2x", HOLDS, ""),  # the papers' finding, not a vacuous one
        ("rope >= 0.9 at 2x", FAILS, "fails on the mean"),
        ("nope <= 0.1 at 2x", INCONCLUSIVE, "nope is not learned at its training length"),
        ("nope >= rope at 2x", INCONCLUSIVE, "not learned"),
    ],
)
def test_at_chance_past_training_is_judged_for_runs_that_learned_only(
    tmp_path: Path, statement: str, expected: str, why: str
):
    """Issue 45, item 5: `rope <= 0.1 at 2x` on a run that learned the task at its training
    length and is at chance at 2x read `?`; the at-chance guard is for runs that never learned
    (judged at their training length), so it is ✓ now, and nope's zeros stay ?."""
    make_seed_tree(tmp_path / "results", ARITHMETIC, "syn", "arithmetic", 8, lengths=(8, 16))
    record_chance(tmp_path / "results", {"arithmetic": 0.0})
    got = verdicts(tmp_path, {"c": (statement, expected)})["c"]
    assert got.verdict == expected, (got.reason, got.statistic())
    assert why in got.reason


@pytest.mark.parametrize(
    "statement",
    [
        "rope ×r >= alibi ×r at 4x",  # ratios of two zeros
        "rope ×r >= alibi at 4x",
        "rope >= alibi at 4x by acc",  # token accuracy zero too
        "rope ×r >= alibi ×r at 4x by acc",
    ],
)
def test_two_terms_at_zero_are_inconclusive_whatever_the_term_kind(tmp_path: Path, statement):
    """On copy with both at 0, `rope ×r >= alibi ×r at 4x` gave ✓ 9/9: a vacuous pass."""
    make_seed_tree(tmp_path / "results", COPY_ZERO, "syn", task="copy")
    record_chance(tmp_path / "results", {"copy": 0.0}, acc=True)
    got = verdicts(tmp_path, {"zeros": (statement, INCONCLUSIVE)})["zeros"]
    assert got.verdict == INCONCLUSIVE, (got.reason, got.statistic())
    assert "at chance" in got.reason


def test_a_term_the_report_marks_not_learned_is_inconclusive(tmp_path: Path):
    """nope reaches 0.2 at its training length (the report: `nope (not learned)`); that it keeps
    more at 2x than rope says nothing about extrapolation."""
    values = {"nope": [[0.2, 0.3, 0.1]] * 3, "rope": [[1.0, 0.2, 0.0]] * 3}
    make_seed_tree(tmp_path / "results", values, "syn", task="copy")
    record_chance(tmp_path / "results", {"copy": 0.0})
    got = verdicts(tmp_path, {"nope": ("nope >= rope at 2x", INCONCLUSIVE)})["nope"]
    assert not report_cell(tmp_path, "copy", "nope", 32)["learned"]
    assert got.verdict == INCONCLUSIVE and "nope" in got.reason and "not learned" in got.reason


def test_every_measured_value_is_the_reports_cell(tmp_path: Path):
    """Means and ×r of a learned, above-chance task read as the report's summary: one code path."""
    values = {
        "rope": [[1.0, 0.8, 0.7], [0.9, 0.7, 0.65], [0.95, 0.75, 0.6]],
        "alibi": [[1.0, 0.9, 0.9], [0.95, 0.9, 0.85], [1.0, 0.95, 0.9]],
    }
    make_seed_tree(tmp_path / "results", values, "syn", task="parity")
    record_chance(tmp_path / "results", {"parity": 0.5})
    claims = {"value": ("alibi > rope at 4x", HOLDS), "ratio": ("alibi ×r > rope ×r at 2x", HOLDS)}
    got = verdicts(tmp_path, claims)
    for ident, length, column in (("value", 64, "mean"), ("ratio", 32, "ratio_mean")):
        assert got[ident].verdict == HOLDS, (got[ident].reason, got[ident].statistic())
        for m in got[ident].measured:
            cell = report_cell(tmp_path, "parity", m.term.removesuffix(" ×r"), length)
            assert m.mean == pytest.approx(cell[column]), (ident, m.term)
        assert got[ident].metric == "exact_match_above_chance"
