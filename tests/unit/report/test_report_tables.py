"""Report summaries on hand-made eval rows: mean ± std, n, ratio, best, notes, filters."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from posx.errors import ConfigError
from posx.report import make_report
from posx.report.data import load_evals, metric_by_task, normalize, select
from posx.report.protocols import add_ratio
from posx.report.tables import fmt_ratio, fmt_value, pivot, summarize


def row(enc, seed, length, loss, *, task="copy", train=8, overrides="", status="ok", **extra):
    ok = status == "ok"
    return {
        "schema_version": 1,
        "run": f"{task}_{enc}_s{seed}",
        "run_dir": f"{task}_{enc}_L{train}_s{seed}",
        "encoding": enc,
        "task": task,
        "model": "tiny",
        "seed": seed,
        "train_length": train,
        "mode": "full",
        "overrides": overrides,
        "window": length,
        "stride": length,
        "eval_length": length,
        "status": status,
        "reason": "" if ok else f"Learned has {train} positions; asked for {length}",
        "loss": loss if ok else math.nan,
        "acc": 1 / (1 + loss) if ok else math.nan,
        "exact_match": math.nan,
        "bpb": math.nan,
        **extra,
    }


def frame() -> pd.DataFrame:
    return pd.DataFrame(
        [
            row("a", 0, 8, 1.0), row("a", 0, 16, 2.0),
            row("a", 1, 8, 2.0), row("a", 1, 16, 3.0),
            row("b", 0, 8, 1.2), row("b", 0, 16, 1.3),
            row("b", 1, 8, 1.4), row("b", 1, 16, 1.5),
            row("learned", 0, 8, 1.1), row("learned", 0, 16, None, status="unsupported"),
            # an eval-time variant evaluated only past the training length: ratio falls back
            # to the plain row of the same run at its training length
            row("a", 0, 16, 1.5, overrides="encoding.base=9"),
        ]
    )  # fmt: skip


def cells(summary: pd.DataFrame) -> pd.DataFrame:
    return summary.set_index(["variant", "eval_length"])


def test_mean_std_n_by_hand():
    got = cells(summarize(frame(), "loss"))
    assert got.loc[("a", 8), "mean"] == pytest.approx(1.5)
    assert got.loc[("a", 8), "std"] == pytest.approx(math.sqrt(0.5))  # ddof 1: (0.25*2)/1
    assert got.loc[("a", 16), "mean"] == pytest.approx(2.5)
    assert got.loc[("b", 16), "mean"] == pytest.approx(1.4)
    assert got.loc[("b", 16), "std"] == pytest.approx(math.sqrt(0.02))
    assert got.loc[("a", 8), "n"] == 2 and got.loc[("learned", 8), "n"] == 1
    assert math.isnan(got.loc[("learned", 8), "std"])


def test_ratio_is_the_metric_over_the_runs_own_value_at_its_training_length():
    got = cells(summarize(frame(), "loss"))
    # a: seed 0 2.0/1.0 = 2, seed 1 3.0/2.0 = 1.5
    assert got.loc[("a", 16), "ratio_mean"] == pytest.approx(1.75)
    assert got.loc[("a", 16), "ratio_std"] == pytest.approx(math.sqrt(2 * 0.25**2))
    assert got.loc[("a", 8), "ratio_mean"] == pytest.approx(1.0)
    assert got.loc[("a+base=9", 16), "ratio_mean"] == pytest.approx(1.5)
    # ×r is a ratio of the metric the table shows, here accuracy acc = 1 / (1 + loss):
    # a seed 0 (1/3)/(1/2) = 2/3, seed 1 (1/4)/(1/3) = 3/4 (it used to be the loss ratio, 1.75)
    acc = cells(summarize(frame(), "acc"))
    assert acc.loc[("a", 16), "ratio_mean"] == pytest.approx((2 / 3 + 3 / 4) / 2)


def test_ratio_prefers_the_same_variant_and_protocol():
    rows = frame()
    extra = pd.DataFrame(
        [row("b", 0, 8, 2.6, overrides="x=1"), row("b", 0, 16, 3.9, overrides="x=1")]
    )
    got = add_ratio(normalize(pd.concat([rows, extra], ignore_index=True)))
    pick = got[(got["overrides"] == "x=1") & (got["eval_length"] == 16)]
    assert pick["ratio"].iloc[0] == pytest.approx(1.5)


def test_unsupported_cells_keep_status_and_reason_and_get_notes():
    summary = summarize(frame(), "loss")
    bad = cells(summary).loc[("learned", 16)]
    assert bad["n"] == 0 and bad["status"] == "unsupported" and math.isnan(bad["mean"])
    assert bad["reason"] == "Learned has 8 positions; asked for 16"
    (table,) = pivot(summary)
    cell = table.cell("learned", 16)
    assert fmt_value(cell) == "unsupported" and cell.note == 1
    assert table.notes == ["unsupported: Learned has 8 positions; asked for 16"]
    assert fmt_value(table.cell("nosuch", 16)) == "—"


def test_best_per_column_direction_and_format():
    summary = summarize(frame(), "loss")
    best = set(summary.loc[summary["best"], ["variant", "eval_length"]].itertuples(index=False))
    assert best == {("learned", 8), ("b", 16)}  # lowest loss per length
    acc = summarize(frame(), "acc", learned=0)  # acc < 0.5 at L=8: none would count as learned
    best = set(acc.loc[acc["best"], ["variant", "eval_length"]].itertuples(index=False))
    assert best == {("learned", 8), ("b", 16)}  # acc = 1/(1+loss): highest where loss lowest
    (table,) = pivot(summary)
    assert fmt_value(table.cell("a", 16)) == "2.500 ± 0.707"
    assert fmt_value(table.cell("learned", 8), digits=2) == "1.10"
    assert fmt_ratio(table.cell("a", 16), 16, 8) == "×1.75"
    assert fmt_ratio(table.cell("a", 8), 8, 8) == ""  # the training length itself


def test_by_moves_columns_into_row_labels():
    rows = pd.concat(
        [frame(), pd.DataFrame([row("a", 0, 8, 0.5, train=16), row("a", 0, 16, 0.6, train=16)])]
    )
    assert len(pivot(summarize(rows, "loss"))) == 2  # one table per train length
    (table,) = pivot(summarize(rows, "loss", by=["train_length"]), by=["train_length"])
    assert "a · L_train=16" in table.rows and "a · L_train=8" in table.rows
    assert table.cell("a · L_train=16", 16).ratio == pytest.approx(0.6 / 0.6)
    assert table.cell("a · L_train=16", 16).best  # best across both train lengths


def test_metric_auto_is_per_task():
    text = row("a", 0, 8, 2.0, task="text")
    text["bpb"] = 2.0 / math.log(2)
    rows = normalize(pd.concat([frame(), pd.DataFrame([text])], ignore_index=True))
    assert metric_by_task(rows, "auto") == {"copy": "loss", "text": "bpb"}
    with pytest.raises(ConfigError, match="metric 'bpb' is not recorded for task 'copy'"):
        metric_by_task(rows, "bpb")
    with pytest.raises(ConfigError, match="unknown metric 'nope'; choose from auto, loss"):
        metric_by_task(rows, "nope")


def test_select_filters_and_errors():
    rows = normalize(frame())
    assert set(select(rows, encodings=["a,b"])["encoding"]) == {"a", "b"}
    assert set(select(rows, variants=["base"])["overrides"]) == {""}
    assert set(select(rows, variants=["encoding.base=9"])["variant"]) == {"a+base=9"}
    with pytest.raises(ConfigError, match=r"no results for --encoding 'z'; available: a, b"):
        select(rows, encodings=["z"])
    with pytest.raises(ConfigError, match=r"--variant 'x=2'; available: base, all, a, a\+base=9"):
        select(rows, variants=["x=2"])
    assert select(rows, encodings=["z"], strict=False).empty


def write_tree(root: Path, rows: pd.DataFrame) -> None:
    for run_dir, part in rows.groupby("run_dir"):
        path = root / "sweeps" / "s1" / run_dir
        path.mkdir(parents=True)
        info = {"schema_version": 1, "run": run_dir, **part.iloc[0][["encoding", "task"]]}
        (path / "run.json").write_text(json.dumps(info))
        part.drop(columns="run_dir").to_csv(path / "eval.csv", index=False)


def test_make_report_from_a_tree_on_disk(tmp_path):
    write_tree(tmp_path, frame())
    loaded = load_evals(tmp_path)
    runs = ("a_L8_s0", "a_L8_s1", "b_L8_s0", "b_L8_s1", "learned_L8_s0")
    assert set(loaded["run_dir"]) == {f"sweeps/s1/copy_{r}" for r in runs}
    report = make_report(tmp_path, metric="loss")
    assert report.rank is None  # one task: no ranking unless asked
    assert make_report(tmp_path, rank=True).rank is not None
    with pytest.raises(ConfigError, match="--digits must be between 0 and 10"):
        make_report(tmp_path, digits=-1)
