"""Issue 24 end to end on a result tree: runs that did not learn are marked in every format
and ranked last (issue 30); tasks at chance carry no rank; old eval.csv files still load."""

from __future__ import annotations

import io
import math
import re

import pandas as pd
import pytest

from posx.report import make_report, render, report_figures, rich_renderables
from tests.unit.report.report_trees import make_issue24_tree


@pytest.fixture
def issue(tmp_path):
    make_issue24_tree(tmp_path)
    return make_report(tmp_path)


def test_ranking_uses_learned_runs_and_informative_tasks_only(issue):
    rank = issue.rank.set_index("variant")
    # copy: alibi and rope learned (0.963, 0.887 >= 0.5) and rank 1, 2; the three that did not
    # share places 3-5 (4 each); parity is at chance and addition at 0: no rank for anyone
    assert dict(rank["tasks"]) == dict.fromkeys(["alibi", "nope", "rope", "sinusoidal", "t5"], 1)
    assert dict(rank["mrr"]) == pytest.approx(
        {"alibi": 1.0, "rope": 0.5, "nope": 0.25, "t5": 0.25, "sinusoidal": 0.25}
    )
    assert list(rank.index[:2]) == ["alibi", "rope"]
    assert rank.loc["nope", "copy"] == "4 (not learned)"
    assert set(rank["parity"]) == {"not learned"}  # 0.51 is 0.02 above chance at L=16
    assert set(rank["addition"]) == {"not learned"}


def test_without_the_learned_threshold_parity_and_addition_still_carry_no_rank(tmp_path):
    make_issue24_tree(tmp_path)
    rank = make_report(tmp_path, learned=0).rank.set_index("variant")
    assert set(rank["parity"]) == {"at chance"} and set(rank["addition"]) == {"at chance"}
    assert dict(rank["tasks"]) == dict.fromkeys(["alibi", "nope", "rope", "sinusoidal", "t5"], 1)


def test_not_learned_is_marked_in_every_format(issue):
    md = render(issue, "md")
    assert "| nope (not learned) |" in md and "| alibi |" in md
    assert "not learned = below --learned" in md
    summary = pd.read_csv(io.StringIO(render(issue, "csv")))
    learned = summary[summary["task"] == "copy"].groupby("variant")["learned"].first()
    assert dict(learned) == {"alibi": True, "nope": False, "rope": True, "sinusoidal": False,
                             "t5": False}  # fmt: skip
    html = render(issue, "html")
    assert '<tr class="unlearned"><td>nope (not learned)</td>' in html
    assert "tasks ranked" in html
    assert "t5 (not learned)" in render(issue, "latex")
    from rich.console import Console

    console = Console(record=True, width=200)
    for part in rich_renderables(issue):
        console.print(part)
    text = console.export_text()
    # after the label, in parentheses: on a line of its own it read as a row named so
    assert re.search(r"│ sinusoidal \(not learned\) +│", text)
    assert re.search(r"^│ not learned +│", text, re.M) is None  # no label line of it alone
    assert re.search(r"│ alibi +│.*\n│ +│", text) is None  # alibi: one line, unmarked


def test_plots_fade_runs_that_did_not_learn(issue):
    figs = dict(report_figures(issue))
    lines = {
        ln.get_label(): ln for ln in figs["length_copy_tiny_L16_full_exact_match"].axes[0].lines
    }
    assert lines["nope (not learned)"].get_linestyle() == ":"
    assert lines["nope (not learned)"].get_alpha() < 1
    assert lines["alibi"].get_alpha() in (None, 1)


def test_parity_is_reported_above_chance(issue):
    parity = issue.summary[issue.summary["task"] == "parity"].set_index(["variant", "eval_length"])
    assert set(parity["metric"]) == {"exact_match_above_chance"}
    assert parity.loc[("alibi", 32), "mean"] == pytest.approx((0.52 - 0.5) / 0.5)
    copy = issue.summary[issue.summary["task"] == "copy"]
    assert set(copy["metric"]) == {"exact_match"}  # chance 0: unchanged, same name


def test_old_eval_csv_without_chance_loads(tmp_path):
    make_issue24_tree(tmp_path, chance=False)
    report = make_report(tmp_path)
    parity = report.summary[report.summary["task"] == "parity"]
    assert set(parity["metric"]) == {"exact_match"}  # chance unknown: counted as 0
    assert not math.isnan(parity["mean"].iloc[0])
    assert parity.set_index(["variant", "eval_length"]).loc[("alibi", 32), "mean"] == 0.52
    assert report.rank is not None
    assert any("no chance level" in w and "posx eval" in w for w in report.warnings)


def test_a_damaged_chance_column_is_refused_or_ignored(tmp_path):
    make_issue24_tree(tmp_path)
    path = tmp_path / "runs" / "parity_alibi_s0" / "eval.csv"
    frame = pd.read_csv(path)
    path.write_text(frame.assign(chance="lots").to_csv(index=False))
    with pytest.warns(UserWarning, match=r"chance 'lots' in line 2 is not a number"):
        make_report(tmp_path)  # that table is left out, the others are reported
    path.write_text(frame.assign(chance=7.0).to_csv(index=False))  # not a chance level
    report = make_report(tmp_path)
    alibi = report.summary[
        (report.summary["task"] == "parity") & (report.summary["variant"] == "alibi")
    ]
    assert alibi.set_index("eval_length").loc[32, "mean"] == pytest.approx(0.52)  # unchanged
