"""Mean reciprocal rank across tasks (Kazemnejad et al. 2023), golden values by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from posx.errors import ConfigError
from posx.report.rank import rank_table, ranked_lengths, scenario_names
from posx.report.tables import pivot, summarize


def row(task, enc, length, value, status="ok", **extra):
    ok = status == "ok"
    metric = "loss" if task.startswith("t1") else "exact_match"
    rec = {
        "run_dir": f"{task}_{enc}",
        "encoding": enc,
        "task": task,
        "model": "tiny",
        "seed": 0,
        "train_length": 8,
        "mode": "full",
        "overrides": "",
        "eval_length": length,
        "status": status,
        "reason": "" if ok else "too long",
        "loss": 1.0,
        "exact_match": math.nan,
    }
    rec[metric] = value if ok else math.nan
    return {**rec, **extra}


ROWS = [
    # t1 (loss, lower is better). Past training: a (2+4)/2=3, b (1+3)/2=2, c (2.5+3.5)/2=3
    ("t1", "a", 8, 1.0), ("t1", "a", 16, 2.0), ("t1", "a", 32, 4.0),
    ("t1", "b", 8, 1.0), ("t1", "b", 16, 1.0), ("t1", "b", 32, 3.0),
    ("t1", "c", 8, 0.1), ("t1", "c", 16, 2.5), ("t1", "c", 32, 3.5),
    # t2 (exact match, higher is better): a 0.8, b unsupported at 32 (worst), c 0.6, d 0.1
    ("t2", "a", 8, 1.0), ("t2", "a", 16, 0.9), ("t2", "a", 32, 0.7),
    ("t2", "b", 8, 1.0), ("t2", "b", 16, 0.5),
    ("t2", "c", 8, 1.0), ("t2", "c", 16, 0.6), ("t2", "c", 32, 0.6),
    ("t2", "d", 8, 1.0), ("t2", "d", 16, 0.1), ("t2", "d", 32, 0.1),
]  # fmt: skip


def tables():
    rows = [row(*r) for r in ROWS] + [row("t2", "b", 32, None, status="unsupported")]
    return pivot(summarize(pd.DataFrame(rows), "auto"))


def test_ranks_and_mrr_by_hand():
    got = rank_table(tables()).set_index("variant")
    # t1 ranks: b 1, a and c tie for 2nd and 3rd: 2.5 each; t2: a 1, c 2, d 3, b 4
    assert dict(got["t1"].dropna()) == {"a": 2.5, "b": 1, "c": 2.5}
    assert dict(got["t2"]) == {"a": 1, "b": 4, "c": 2, "d": 3}
    expected = {
        "a": (1 / 2.5 + 1) / 2,
        "b": (1 + 1 / 4) / 2,
        "c": (1 / 2.5 + 1 / 2) / 2,
        "d": 1 / 3,
    }
    for variant, mrr in expected.items():
        assert got.loc[variant, "mrr"] == pytest.approx(mrr)
    assert dict(got["tasks"]) == {"a": 2, "b": 2, "c": 2, "d": 1}
    assert list(got.index) == ["a", "b", "c", "d"]  # sorted by MRR


def test_all_lengths_includes_the_training_length():
    got = rank_table(tables(), "all").set_index("variant")
    # t1 over 8, 16, 32: a 7/3, b 5/3, c 6.1/3 -> b 1, c 2, a 3
    assert dict(got["t1"].dropna()) == {"a": 3, "b": 1, "c": 2}


def test_ranked_lengths_and_names():
    t1, t2 = tables()
    assert ranked_lengths(t1) == [16, 32] and ranked_lengths(t1, "all") == [8, 16, 32]
    assert scenario_names([t1, t2]) == ["t1", "t2"]
    with pytest.raises(ConfigError, match="unknown --rank-lengths 'x'"):
        ranked_lengths(t1, "x")


def test_scenarios_that_share_a_task_are_told_apart():
    rows = [row(*r) for r in ROWS if r[0] == "t1"]
    rows += [
        {**row(*r), "train_length": 16, "run_dir": f"L16_{r[1]}"} for r in ROWS if r[0] == "t1"
    ]
    names = scenario_names(pivot(summarize(pd.DataFrame(rows), "loss")))
    assert names == ["t1 · L=8", "t1 · L=16"]


def ranking(rows, **kw):
    """The rank table of ``(task, encoding, length, value)`` rows (train length 8)."""
    return rank_table(pivot(summarize(pd.DataFrame(rows), "auto", **kw))).set_index("variant")


def test_four_way_ties_share_average_ranks():
    # past training: a 0.9, b 0.5, c 0.5, d 0.1 -> 1, 2.5, 2.5, 4 (the old code gave 1, 2, 2, 4)
    past = {"a": 0.9, "b": 0.5, "c": 0.5, "d": 0.1}
    got = ranking([row("t2", e, x, v) for e in past for x, v in ((8, 1.0), (16, past[e]))])
    assert dict(got["t2"]) == {"a": 1.0, "b": 2.5, "c": 2.5, "d": 4.0}
    assert got.loc["b", "mrr"] == pytest.approx(1 / 2.5)


def test_a_task_where_every_run_is_at_zero_carries_no_rank():
    # every run learned t2 (1.0 at length 8) and none extrapolates (0.0 past it)
    rows = [row("t2", e, x, v) for e in "abc" for x, v in ((8, 1.0), (16, 0.0), (32, 0.0))]
    got = ranking([*rows, *(row(*r) for r in ROWS if r[0] == "t1")])
    assert set(got["t2"]) == {"at chance"}
    assert dict(got["tasks"]) == {"a": 1, "b": 1, "c": 1}  # t1 only
    assert dict(got["mrr"]) == pytest.approx({"a": 1 / 2.5, "b": 1.0, "c": 1 / 2.5})


def test_a_task_where_every_run_is_at_chance_carries_no_rank():
    # parity: chance 0.5 on 1000 sequences, so ±2 standard errors is ±0.032 exact match
    above = {"a": 0.51, "b": 0.49, "c": 0.53}
    rows = [
        row("t2", e, x, v, chance=0.5, sequences=1000)
        for e in "abc"
        for x, v in ((8, 1.0), (16, above[e]), (32, above[e]))
    ]
    got = ranking([*rows, *(row(*r) for r in ROWS if r[0] == "t1")])
    assert set(got["t2"]) == {"at chance"}
    assert dict(got["tasks"]) == {"a": 1, "b": 1, "c": 1}
    # one run clearly above chance makes the column count again
    rows += [
        row("t2", "d", x, v, chance=0.5, sequences=1000)
        for x, v in ((8, 1.0), (16, 0.8), (32, 0.7))
    ]
    got = ranking(rows)
    assert got.loc["d", "t2"] == 1.0 and got.loc["d", "tasks"] == 1


def test_parity_is_shown_above_chance():
    rows = [row("t2", "a", x, v, chance=0.5, sequences=100) for x, v in ((8, 0.95), (16, 0.75))]
    summary = summarize(pd.DataFrame(rows), "auto").set_index("eval_length")
    assert set(summary["metric"]) == {"exact_match_above_chance"}
    assert summary.loc[16, "mean"] == pytest.approx((0.75 - 0.5) / (1 - 0.5))
    assert summary.loc[8, "mean"] == pytest.approx(0.9)
    assert summary.loc[16, "margin"] == pytest.approx(2 * math.sqrt(0.5 / (0.5 * 100)))


def test_a_run_that_did_not_learn_is_shown_and_ranked_last():
    values = {"a": (0.96, 0.5), "b": (0.89, 0.4), "nope": (0.002, 0.6)}  # nope: 0.2% in domain
    rows = [row("t2", e, x, vs[x > 8]) for e, vs in values.items() for x in (8, 16)]
    rows += [row(*r) for r in ROWS if r[0] == "t1"]
    summary = summarize(pd.DataFrame(rows), "auto")
    (t1, t2) = pivot(summary)
    assert t2.not_learned == {"nope"} and t2.rows == ["a", "b", "nope"]  # still in the table
    assert not summary.loc[summary["variant"] == "nope", "best"].any()  # 0.6 is not "best"
    got = rank_table([t1, t2]).set_index("variant")
    # nope's 0.6 past training would rank first; not learned, it ranks last
    assert dict(got["t2"].dropna()) == {"a": 1.0, "b": 2.0, "nope": "3 (not learned)"}
    assert got.loc["nope", "tasks"] == 1 and got.loc["nope", "mrr"] == pytest.approx(1 / 3)
    assert list(got.index)[-1] == "nope"
    # the threshold is an option: at 0.9 b is out too (b and nope share places 2 and 3), at 0
    # everyone is ranked by score
    assert ranking(rows, learned=0.9).loc["b", "t2"] == "2.5 (not learned)"
    assert ranking(rows, learned=0).loc["nope", "t2"] == 1.0


def test_loss_threshold_applies_only_when_set():
    rows = [row(*r) for r in ROWS if r[0] == "t1"]  # loss at length 8: a 1.0, b 1.0, c 0.1
    assert "not learned" not in set(ranking(rows)["t1"])
    assert dict(ranking(rows, learned_loss=0.5)["t1"]) == {
        "a": "2.5 (not learned)", "b": "2.5 (not learned)", "c": 1.0,
    }  # fmt: skip


@pytest.mark.parametrize(("learned", "loss"), [(1.5, None), (-0.1, None), (0.5, 0.0)])
def test_thresholds_out_of_range_are_errors(tmp_path, learned, loss):
    from posx.report import make_report

    with pytest.raises(ConfigError, match="--learned"):
        make_report(tmp_path, learned=learned, learned_loss=loss)


def test_a_few_lucky_sequences_out_of_a_thousand_are_still_zero():
    """Chance 0: one or two exact matches in 1,000 sequences (issue 24's synthetic presets past
    training: 0.001 against 0.000) are within the rule of three (3/n, the 95% bound for zero
    successes) and give no rank; 1% is above it."""
    rows = [
        row("t2", e, x, v, chance=0.0, sequences=1000)
        for e, past in (("a", 0.001), ("b", 0.0), ("c", 0.002))
        for x, v in ((8, 1.0), (16, past), (32, 0.0))
    ]
    got = ranking([*rows, *(row(*r) for r in ROWS if r[0] == "t1")])
    assert set(got["t2"]) == {"at chance"}
    rows += [
        row("t2", "d", x, v, chance=0.0, sequences=1000)
        for x, v in ((8, 1.0), (16, 0.02), (32, 0.0))
    ]
    assert ranking(rows).loc["d", "t2"] == 1.0


def test_failing_a_task_never_raises_the_mrr():
    """Issue 30, item 4, exactly: one variant learns copy and reverse (rank 2 on copy, 1 on
    reverse), the other learns copy only (rank 1 there). Leaving the task it failed out of its
    MRR gave it 1.00 against 0.75; ranked last on reverse it has (1 + 1/2) / 2 = 0.75 too."""
    values = {
        ("copy", "learns_both"): (1.0, 0.5), ("copy", "learns_copy"): (1.0, 0.9),
        ("reverse", "learns_both"): (1.0, 0.5), ("reverse", "learns_copy"): (0.0, 0.0),
    }  # fmt: skip
    rows = [row(t, e, x, vs[x > 8]) for (t, e), vs in values.items() for x in (8, 16)]
    got = ranking(rows)
    assert dict(got["mrr"]) == pytest.approx({"learns_both": 0.75, "learns_copy": 0.75})
    assert dict(got["tasks"]) == {"learns_both": 2, "learns_copy": 2}
    assert dict(got["copy"]) == {"learns_both": 2.0, "learns_copy": 1.0}
    assert got.loc["learns_copy", "reverse"] == "2 (not learned)"


def test_rows_that_did_not_learn_share_the_last_ranks():
    # a 1, b 2 among the learned; c and d did not learn: ranks 3 and 4, shared as 3.5 each
    past = {"a": (1.0, 0.9), "b": (1.0, 0.5), "c": (0.1, 0.95), "d": (0.0, 0.0)}
    got = ranking([row("t2", e, x, past[e][x > 8]) for e in past for x in (8, 16)])
    assert dict(got["t2"]) == {"a": 1.0, "b": 2.0, "c": "3.5 (not learned)",
                               "d": "3.5 (not learned)"}  # fmt: skip
    assert dict(got["mrr"]) == pytest.approx({"a": 1, "b": 1 / 2, "c": 1 / 3.5, "d": 1 / 3.5})


def test_a_task_no_row_learned_carries_no_rank():
    rows = [row("t2", e, x, v) for e in "ab" for x, v in ((8, 0.1), (16, 0.0))]
    got = ranking([*rows, *(row(*r) for r in ROWS if r[0] == "t1")])
    assert got.loc["a", "t2"] == got.loc["b", "t2"] == "not learned"
    assert dict(got["tasks"]) == {"a": 1, "b": 1, "c": 1}  # t1 only
