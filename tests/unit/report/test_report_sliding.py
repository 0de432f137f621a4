"""Issue 30, item 2: one sliding evaluation of a run is one row of its table.

With posx's defaults a sliding evaluation records ``window=W stride=W`` at the training length
(one window reads the whole sequence) and ``stride=W/2`` past it. Those rows are one protocol:
one table row, with ×r (the value over the training length's) and the "not learned" check.
Genuinely different protocols (another window, an explicit stride) keep rows of their own.
Trees are written as posx's evaluator records the protocol (``resolve_protocol``)."""

from __future__ import annotations

import pytest

from posx.report import make_report, render
from posx.report.data import load_evals
from posx.report.labels import label_rows
from posx.report.plots.data import position_values
from posx.report.protocols import add_ratio
from tests.unit.report.report_trees import make_eval_tree

ROPE = (0.9, 0.45, 0.09)  # exact match at 8 (the training length), 16, 32


def test_one_default_sliding_evaluation_is_one_row_with_its_ratio(tmp_path):
    make_eval_tree(tmp_path, {"rope": ROPE, "alibi": (0.8, 0.6, 0.4)})
    (table,) = make_report(tmp_path).tables
    assert table.rows == ["alibi", "rope"]
    assert table.cell("rope", 8).mean == pytest.approx(0.9)
    assert table.cell("rope", 16).ratio == pytest.approx(0.5)
    assert table.cell("rope", 32).ratio == pytest.approx(0.1)
    assert table.cell("alibi", 32).ratio == pytest.approx(0.5)


def test_the_not_learned_check_applies_to_a_sliding_row(tmp_path):
    make_eval_tree(tmp_path, {"rope": ROPE, "nope": (0.1, 0.6, 0.5)})
    (table,) = make_report(tmp_path).tables
    assert table.not_learned == {"nope"}
    assert not table.cell("nope", 16).best  # 0.6 beats rope's 0.45, but nope never learned


def test_a_sliding_evaluation_ranks_once(tmp_path):
    make_eval_tree(tmp_path, {"rope": ROPE, "alibi": (0.8, 0.6, 0.4)})
    make_eval_tree(tmp_path, {"rope": (0.9, 0.2, 0.1), "alibi": (0.8, 0.6, 0.4)}, task="reverse")
    rank = make_report(tmp_path).rank.set_index("variant")
    assert sorted(rank.index) == ["alibi", "rope"]
    assert dict(rank["copy"]) == {"alibi": 1.0, "rope": 2.0}


def test_an_explicit_stride_is_its_own_row_and_shares_the_training_length(tmp_path):
    make_eval_tree(tmp_path, {"rope": ROPE})
    make_eval_tree(tmp_path, {"rope": (0.9, 0.72, 0.36)}, stride=2)
    (table,) = make_report(tmp_path).tables
    default, explicit = "rope · window=8 stride=4", "rope · window=8 stride=2"
    assert sorted(table.rows) == [explicit, default]
    for row, ratio in ((default, 0.5), (explicit, 0.8)):
        assert table.cell(row, 8).mean == pytest.approx(0.9)
        assert table.cell(row, 16).ratio == pytest.approx(ratio)
    assert not table.not_learned


def test_a_window_longer_than_the_training_length_is_one_row(tmp_path):
    # window 16: one window at 8 and 16 (stride = L), stride 8 at 32
    make_eval_tree(tmp_path, {"rope": ROPE}, window=16)
    (table,) = make_report(tmp_path).tables
    assert table.rows == ["rope"]
    assert table.cell("rope", 32).ratio == pytest.approx(0.1)


def test_two_windows_of_one_run_are_two_rows(tmp_path):
    make_eval_tree(tmp_path, {"rope": ROPE})
    make_eval_tree(tmp_path, {"rope": (0.9, 0.8, 0.3)}, window=16)
    (table,) = make_report(tmp_path).tables
    assert sorted(table.rows) == ["rope · window=16 stride=8", "rope · window=8 stride=4"]
    assert table.cell("rope · window=16 stride=8", 8).mean == pytest.approx(0.9)  # shared
    assert table.cell("rope · window=16 stride=8", 16).mean == pytest.approx(0.8)
    assert table.cell("rope · window=8 stride=4", 16).mean == pytest.approx(0.45)
    assert table.cell("rope · window=16 stride=8", 32).ratio == pytest.approx(0.3 / 0.9)


def test_full_and_sliding_of_one_run_stay_apart(tmp_path):
    make_eval_tree(tmp_path, {"rope": ROPE})
    make_eval_tree(tmp_path, {"rope": (0.9, 0.3, 0.0)}, mode="full")
    report = make_report(tmp_path, by=["mode"])
    (table,) = report.tables
    assert sorted(table.rows) == ["rope · mode=full", "rope · mode=sliding"]
    assert table.cell("rope · mode=full", 16).ratio == pytest.approx(1 / 3)
    assert table.cell("rope · mode=sliding", 16).ratio == pytest.approx(0.5)
    assert "| rope · mode=sliding | 1 | **0.900** | **0.450** ×0.50 |" in render(report, "md")


def test_add_ratio_on_raw_rows_uses_the_evaluation_of_each_row(tmp_path):
    """The claims call ``add_ratio`` on rows that were never labelled."""
    make_eval_tree(tmp_path, {"rope": ROPE})
    rows = add_ratio(load_evals(tmp_path), "exact_match").set_index("eval_length")
    assert rows.loc[16, "ratio"] == pytest.approx(0.5)
    assert rows.loc[32, "ratio"] == pytest.approx(0.1)


def test_positions_of_a_shared_row_are_drawn_under_each_evaluation(tmp_path):
    make_eval_tree(tmp_path, {"rope": ROPE})
    make_eval_tree(tmp_path, {"rope": (0.9, 0.8, 0.3)}, window=16)
    evals, _ = label_rows(load_evals(tmp_path))
    keys = ["run_dir", "overrides", "mode", "eval_length", "window", "stride", "task", "variant"]
    positions = evals.drop_duplicates(keys)[keys].assign(bucket_start=0, bucket_end=8, loss=1.0,
                                                         acc=0.5)  # fmt: skip
    got = position_values(positions, evals, {"copy": "exact_match"})
    both = ["rope · window=16 stride=8", "rope · window=8 stride=4"]
    assert sorted(got.loc[got["eval_length"] == 8, "label"]) == both
    assert list(got.loc[got["eval_length"] == 16, "label"].sort_values()) == both
