"""Every number names its unit; ×r is a ratio of the metric it sits beside; plots under a table
draw that table's metric."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from posx.report import make_report, render, report_figures
from posx.report.tables import fmt_ratio, title
from posx.report.units import auto_metric, eval_summary, metric_label

LN2 = math.log(2)


def write_run(root: Path, task: str, enc: str, seed: int, rows: list[dict], buckets=()) -> None:
    run = root / "runs" / f"{task}_{enc}_s{seed}"
    run.mkdir(parents=True)
    ident = {"schema_version": 1, "run": run.name, "encoding": enc, "task": task,
             "model": "tiny", "seed": seed, "train_length": 8}  # fmt: skip
    (run / "run.json").write_text(json.dumps(ident))
    key = {**ident, "overrides": "", "mode": "full", "status": "ok", "reason": ""}
    evals = [{**key, "window": r["eval_length"], "stride": r["eval_length"], **r} for r in rows]
    pd.DataFrame(evals).to_csv(run / "eval.csv", index=False)
    if buckets:
        pos = [
            {**key, "window": b["eval_length"], "stride": b["eval_length"], **b} for b in buckets
        ]
        pd.DataFrame(pos).to_csv(run / "eval_positions.csv", index=False)


def test_titles_and_labels_name_the_unit():
    meta = {"task": "text", "model": "tiny", "train_length": 64, "mode": "full"}
    assert "bpb [bits/byte], lower is better" in title({**meta, "metric": "bpb"})
    assert "loss [nats/token]" in title({**meta, "metric": "loss"})
    assert "exact_match [fraction of sequences], higher" in title({**meta, "metric": "exact_match"})
    assert "trained at 64 tokens" in title({**meta, "metric": "loss"})
    assert metric_label("peak_mem_mb") == "peak_mem_mb [MiB]"
    assert metric_label("acc_depth_0.5") == "acc_depth_0.5 [fraction]"


def test_eval_prints_the_reports_metric_with_its_unit():
    text = {"eval_length": 1024, "status": "ok", "loss": 1.386, "bpb": 1.386 / LN2,
            "exact_match": math.nan}  # fmt: skip
    assert auto_metric(text) == "bpb"
    assert eval_summary(text) == "L=1024: 2.000 bits/byte"
    copy = {"eval_length": 32, "status": "ok", "loss": 0.5, "bpb": math.nan, "exact_match": 0.25}
    assert eval_summary(copy) == "L=32: 0.250 exact_match (fraction of sequences)"
    plain = {"eval_length": 16, "status": "ok", "loss": 0.5, "bpb": math.nan}
    assert eval_summary(plain) == "L=16: 0.500 nats/token"
    assert eval_summary({"eval_length": 64, "status": "failed", "loss": math.nan}) == "L=64: failed"


def test_ratio_beside_exact_match_is_the_exact_match_ratio(tmp_path):
    # Exact match halves from 8 to 16 while the loss triples: ×0.50, not the loss's ×3.00.
    rows = [{"eval_length": 8, "loss": 0.5, "exact_match": 0.8},
            {"eval_length": 16, "loss": 1.5, "exact_match": 0.4}]  # fmt: skip
    write_run(tmp_path, "copy", "rope", 0, rows)
    report = make_report(tmp_path)  # auto: exact match for a synthetic task
    (table,) = report.tables
    assert table.metric == "exact_match"
    assert fmt_ratio(table.cell("rope", 16), 16, 8) == "×0.50"
    loss = make_report(tmp_path, metric="loss").tables[0]
    assert fmt_ratio(loss.cell("rope", 16), 16, 8) == "×3.00"
    md = render(report, "md")
    assert "exact_match [fraction of sequences]" in md and "same metric" in md


def test_ratio_is_empty_when_the_reference_is_zero(tmp_path):
    rows = [{"eval_length": 8, "loss": 3.0, "exact_match": 0.0},
            {"eval_length": 16, "loss": 4.0, "exact_match": 0.0}]  # fmt: skip
    write_run(tmp_path, "copy", "rope", 0, rows)
    (table,) = make_report(tmp_path).tables
    assert fmt_ratio(table.cell("rope", 16), 16, 8) == ""


def test_position_plot_draws_the_tables_metric(tmp_path):
    pytest.importorskip("matplotlib")
    # Text at 2 bytes per token: bpb = loss / ln 2 / 2 for the row and for every bucket.
    rows = [{"eval_length": 8, "loss": 1.0, "bpb": 1.0 / LN2 / 2, "acc": 0.5},
            {"eval_length": 16, "loss": 2.0, "bpb": 2.0 / LN2 / 2, "acc": 0.4}]  # fmt: skip
    buckets = [{"eval_length": 16, "bucket_start": s, "bucket_end": s + 8, "tokens": 8,
                "loss": 1.0 + s / 8, "acc": 0.5} for s in (0, 8)]  # fmt: skip
    write_run(tmp_path, "text", "rope", 0, rows, buckets)
    report = make_report(tmp_path)
    assert report.tables[0].metric == "bpb"
    pos = report.positions.sort_values("bucket_start")
    assert list(pos["metric"]) == ["bpb", "bpb"]
    assert list(pos["value"]) == pytest.approx([1.0 / LN2 / 2, 2.0 / LN2 / 2])
    fig = dict(report_figures(report))["positions_text_tiny_L8_full"]
    ax = fig.axes[0]
    assert ax.get_ylabel() == "bpb [bits/byte]"
    assert list(ax.lines[0].get_ydata()) == pytest.approx([1.0 / LN2 / 2, 2.0 / LN2 / 2])
    length = dict(report_figures(report))["length_text_tiny_L8_full_bpb"]
    assert length.axes[0].get_ylabel() == "bpb [bits/byte]"


def test_position_plot_under_exact_match_says_what_it_draws(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [{"eval_length": 8, "loss": 1.0, "exact_match": 0.5, "acc": 0.7}]
    buckets = [{"eval_length": 8, "bucket_start": s, "bucket_end": s + 4, "tokens": 4,
                "loss": 1.0, "acc": 0.7} for s in (0, 4)]  # fmt: skip
    write_run(tmp_path, "copy", "rope", 0, rows, buckets)
    report = make_report(tmp_path)
    ax = dict(report_figures(report))["positions_copy_tiny_L8_full"].axes[0]
    assert ax.get_ylabel() == "acc [fraction of scored tokens]"
    assert "exact_match has no per-position value" in ax.get_title().replace("\n", " ")
    assert list(ax.lines[0].get_ydata()) == pytest.approx([0.7, 0.7])


def test_a_value_that_rounds_to_zero_has_no_sign():
    from posx.report.units import fixed

    assert [fixed(v, 3) for v in (-0.0, -1e-9, 0.0, -0.0004, -0.0006, 1.2345)] == [
        "0.000", "0.000", "0.000", "0.000", "-0.001", "1.234"]  # fmt: skip
    assert fixed(-0.0, 2) == "0.00" and fixed(-2.5, 2) == "-2.50"
