"""RULER in posx report: the tasks x lengths table with the average row and the effective
length at a threshold, and the depth x length heatmap summed from the rows' depth grids."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from posx.report.plots.depths import depth_figures, depth_grids, parse_depths
from posx.report.ruler import effective, ruler_sections, table_lines


def rows(scores: dict[int, dict[str, float]], label="m", overrides=""):
    out = []
    for length, by_task in scores.items():
        for task, score in by_task.items():
            out.append({"task": f"ruler/{task}", "eval_length": length, "status": "ok",
                        "score": score, "samples": 10, "encoding": label, "label": label,
                        "overrides": overrides, "model": "pretrained"})  # fmt: skip
    return out


SCORES = {
    4096: {"niah_single_1": 100.0, "vt": 90.0, "average": 95.0},
    8192: {"niah_single_1": 90.0, "vt": 80.0, "average": 85.0},
    16384: {"niah_single_1": 90.0, "vt": 90.0, "average": 90.0},
}


def test_the_table_has_tasks_in_rulers_order_the_average_and_the_effective_length():
    lines = table_lines(rows(SCORES), 85.6)
    assert lines[0].split() == ["4096", "8192", "16384"]
    assert [line.split()[0] for line in lines[1:-1]] == ["niah_single_1", "vt", "average"]
    assert lines[3].split() == ["average", "95.0", "85.0", "90.0"]
    # 8192 is below 85.6, so 16384's 90 does not count: the average must stay above
    assert lines[-1] == "effective length at 85.6: 4096; 10 samples per task"
    assert effective(rows(SCORES), 80.0) == 16384
    assert effective(rows(SCORES), 99.0) is None
    assert "below 4096" in table_lines(rows(SCORES), 99.0)[-1]


def test_a_failed_average_ends_the_effective_length():
    data = rows(SCORES)
    for r in data:
        if r["task"] == "ruler/average" and r["eval_length"] == 8192:
            r.update(status="failed", score=math.nan)
    assert effective(data, 80.0) == 4096
    assert table_lines(data, 80.0)[3].split() == ["average", "95.0", "failed", "90.0"]


def test_the_report_has_a_section_per_label():
    frame = pd.DataFrame(rows(SCORES, "a") + rows(SCORES, "b") + [
        {"task": "text", "eval_length": 4096, "status": "ok", "label": "a", "bpb": 1.0}
    ])  # fmt: skip
    sections = ruler_sections(frame, 85.6)
    assert [s.title for s in sections] == [
        "RULER a: score in percent (string_match_all)",
        "RULER b: score in percent (string_match_all)",
    ]
    assert sections[0].header == ["task", "4096", "8192", "16384"]
    assert sections[0].rows[-1] == ["average", "95.0", "85.0", "90.0"]
    assert sections[0].notes == ["effective length at 85.6: 4096; 10 samples per task"]


def test_depth_grids_sum_tasks_into_ten_percent_bands():
    grid_a = json.dumps({"0": [1.0, 1], "5": [0.0, 1], "97": [1.0, 2], "100": [0.5, 1]})
    grid_b = json.dumps({"3": [1.0, 1], "bad": [1, 1], "50": [3, 2]})  # damaged cells dropped
    frame = pd.DataFrame([
        {"label": "m", "eval_length": 512, "status": "ok", "depth_grid": grid_a, "model": "p"},
        {"label": "m", "eval_length": 512, "status": "ok", "depth_grid": grid_b, "model": "p"},
        {"label": "m", "eval_length": 1024, "status": "failed", "depth_grid": grid_a, "model": "p"},
        {"label": "m", "eval_length": 512, "status": "ok", "depth_grid": None, "model": "p"},
    ])  # fmt: skip
    assert parse_depths(grid_b) == {3: (1.0, 1)}
    grids = depth_grids(frame.dropna(subset=["depth_grid"]))
    assert grids == {"m": {(0, 512): [2.0, 3], (9, 512): [1.5, 3]}}
    pytest.importorskip("matplotlib")
    ((stem, fig),) = depth_figures(frame)
    assert stem == "heatmap_ruler-depths_p_score"
    image = fig.axes[0].images[0].get_array()
    assert image[0, 0] == pytest.approx(100 * 2 / 3) and math.isnan(float(image[5, 0]))
