"""Mean reciprocal rank across tasks (Kazemnejad et al. 2023), golden values by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from posx.errors import ConfigError
from posx.report.rank import rank_table, ranked_lengths, scenario_names
from posx.report.tables import pivot, summarize


def row(task, enc, length, value, status="ok"):
    ok = status == "ok"
    metric = "loss" if task == "t1" else "exact_match"
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
    return rec


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
    # t1 ranks: b 1, a 2, c 2 (tie shares the better rank); t2: a 1, c 2, d 3, b 4
    assert dict(got["t1"].dropna()) == {"a": 2, "b": 1, "c": 2}
    assert dict(got["t2"]) == {"a": 1, "b": 4, "c": 2, "d": 3}
    expected = {"a": (1 / 2 + 1) / 2, "b": (1 + 1 / 4) / 2, "c": (1 / 2 + 1 / 2) / 2, "d": 1 / 3}
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
