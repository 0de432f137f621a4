"""Reports of tasks measured in digits: column headers, titles and the operand-length heatmap
(read from each eval row's ``operand_grid``, which may be damaged)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from posx.report.plots.operands import operand_figures, operand_grids, parse_grid
from posx.report.tables import length_header, tex_length, title


def test_headers_and_titles_name_the_unit():
    digits = {"task": "arithmetic", "train_length": 5, "metric": "exact_match",
              "length_unit": "digits"}  # fmt: skip
    assert length_header(digits, 10) == "10 digits" and tex_length(digits, 10) == "10 digits"
    assert "trained at 5 digits" in title(digits)
    tokens = {"task": "copy", "train_length": 16, "metric": "loss"}  # rows from before the unit
    assert length_header(tokens, 32) == "L=32" and tex_length(tokens, 32) == "$L=32$"
    assert "trained at 16 tokens" in title(tokens)


@pytest.mark.parametrize(
    "text",
    [None, "", "not json", "[1, 2]", '{"a,b": [1, 2]}', '{"1,2": [3, 2]}', '{"1,2": [1]}',
     '{"1,2": [-1, 2]}', '{"1,2,3": [1, 2]}', '{"1,2": ["1", 2]}'],
)  # fmt: skip
def test_a_damaged_grid_is_skipped_not_fatal(text):
    assert parse_grid(text) == {}


def test_grids_sum_over_lengths_and_seeds_and_draw_one_panel_per_row():
    grid = lambda d: json.dumps(d)  # noqa: E731
    rows = pd.DataFrame(
        {
            "task": ["arithmetic"] * 4,
            "model": ["tiny"] * 4,
            "train_length": [3] * 4,
            "label": ["rope", "rope", "rope+coupling", "rope"],
            "status": ["ok", "ok", "ok", "failed"],
            "operand_grid": [grid({"3,1": [1, 2]}), grid({"3,1": [2, 2], "1,3": [0, 1]}),
                             grid({"3,3": [4, 4]}), grid({"3,1": [9, 9]})],
        }
    )  # fmt: skip
    grids = operand_grids(rows)
    assert grids == {"rope": {(3, 1): [3, 4], (1, 3): [0, 1]}, "rope+coupling": {(3, 3): [4, 4]}}
    ((stem, fig),) = operand_figures(rows)
    assert stem == "operands_arithmetic_tiny_L3_exact_match"
    titles = {ax.get_title() for ax in fig.axes}
    assert {"rope", "rope+coupling"} <= titles
    assert "first operand (digits)" in {ax.get_ylabel() for ax in fig.axes}
    assert operand_figures(rows.drop(columns="operand_grid")) == []
