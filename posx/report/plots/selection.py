"""Which plots a report has: a length plot and a heatmap per table, a per-position plot per
table key, a training-loss plot per (task, model, training length), with one colour per row
across all of them. A plot that would be empty is left out, with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from posx.report.labels import table_keys
from posx.report.plots.depths import depth_figures
from posx.report.plots.figures import (
    Figures,
    heatmap_figure,
    length_figure,
    slug,
    training_figure,
    training_key,
)
from posx.report.plots.operands import operand_figures
from posx.report.plots.positions import longest_buckets, positions_figure
from posx.report.plots.style import row_colors
from posx.report.tables import WideTable, length_unit


def _all_rows(
    tables: list[WideTable], positions: pd.DataFrame | None, training: pd.DataFrame | None
) -> dict[str, str]:
    """Every row label of the report's plots with its encoding."""
    rows = {row: enc for t in tables for row, enc in t.encodings.items()}
    if positions is not None and len(positions):
        part = longest_buckets(positions)
        rows.update(zip(part["row"].astype(str), part["encoding"].astype(str), strict=True))
    if training is not None and len(training):
        key = training_key(training)
        rows.update(zip(training[key].astype(str), training["encoding"].astype(str), strict=True))
    return rows


def _single_bucket(part: pd.DataFrame) -> bool:
    longest = longest_buckets(part)
    return bool((longest.groupby("row")["bucket_start"].nunique() < 2).all())


@dataclass
class Plots:
    """The report's figures as (file stem, Figure), and why any expected plot was left out."""

    figures: Figures = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file stem, reason)


def figures(
    tables: list[WideTable],
    positions: pd.DataFrame | None,
    training: pd.DataFrame | None,
    by: Sequence[str] = (),
    rows: pd.DataFrame | None = None,
) -> Plots:
    """Every figure of a report, colours shared across all of them; a plot that would be empty
    is left out with the reason instead. ``rows`` (the labelled eval rows) adds the
    operand-length heatmap of arithmetic runs."""
    colors = row_colors(_all_rows(tables, positions, training))
    out = Plots()
    for t in tables:
        if not any(t.cell(r, x).n for r in t.rows for x in t.lengths):
            why = "no row has a value at any length (every cell unsupported, failed or missing)"
            out.skipped.append((slug("length", t.meta, t.metric), why))
            continue
        out.figures.append((slug("length", t.meta, t.metric), length_figure(t, colors)))
        out.figures.append((slug("heatmap", t.meta, t.metric), heatmap_figure(t, colors)))
    keys = table_keys(by)
    if positions is not None and len(positions):
        for key, part in positions.groupby(keys) if keys else [((), positions)]:
            meta = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
            if _single_bucket(part):
                why = (
                    "per-position plot left out: each row has scored tokens in a single "
                    "position bucket (the task scores only its answer span, or eval.buckets "
                    "covers the whole length); for a finer split, posx eval RUN --buckets N"
                )
                out.skipped.append((slug("positions", meta), why))
                continue
            out.figures.append((slug("positions", meta), positions_figure(meta, part, by, colors)))
    out.figures += operand_figures(rows)
    out.figures += depth_figures(rows)
    units = {str(t.meta.get("task")): length_unit(t.meta) for t in tables}
    if training is not None and len(training):
        for key, part in training.groupby(["task", "model", "train_length"]):
            meta = dict(zip(["task", "model", "train_length"], key, strict=True))
            meta["length_unit"] = units.get(str(meta["task"]), "tokens")
            out.figures.append((slug("training", meta), training_figure(meta, part, colors)))
    stems: dict[str, int] = {}
    unique: Figures = []
    for stem, fig in out.figures:
        stems[stem] = stems.get(stem, 0) + 1
        unique.append((stem if stems[stem] == 1 else f"{stem}-{stems[stem]}", fig))
    out.figures = unique
    return out
