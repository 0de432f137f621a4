"""The operand-length heatmap of arithmetic runs (McLeish et al. 2024, Figure 1; Cho et al.
2024): exact match for every (first operand digits, second operand digits) pair.

Arithmetic eval rows carry ``operand_grid``, JSON ``{"la,lb": [exact, sequences]}`` of one
eval length (:class:`posx.tasks.synthetic.arithmetic.ArithmeticTask`); this module sums the
counts over a row label's eval lengths and seeds and draws one panel per row label, with the
training digits outlined. A cell no eval set reached stays blank.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from posx.report.plots.figures import Figures, colour_bar, panels, slug

COLUMN = "operand_grid"
PANELS_PER_LINE = 4


def parse_grid(text: object) -> dict[tuple[int, int], tuple[int, int]]:
    """``{(la, lb): (exact, sequences)}`` from one row's ``operand_grid``; empty when the cell is
    missing or not of that shape (a damaged file must not stop the report)."""
    if not isinstance(text, str) or not text:
        return {}
    try:
        raw = json.loads(text)
    except ValueError:
        return {}
    grid = {}
    for key, value in raw.items() if isinstance(raw, dict) else []:
        parts = str(key).split(",")
        ok = isinstance(value, list) and len(value) == 2 and len(parts) == 2
        if not ok or not all(p.strip().isdigit() for p in parts):
            continue
        if not all(isinstance(v, int) and v >= 0 for v in value) or value[0] > value[1]:
            continue
        grid[(int(parts[0]), int(parts[1]))] = (value[0], value[1])
    return grid


def operand_grids(rows: pd.DataFrame) -> dict[str, dict[tuple[int, int], list[int]]]:
    """Row label -> ``{(la, lb): [exact, sequences]}`` summed over eval lengths and seeds."""
    out: dict[str, dict[tuple[int, int], list[int]]] = {}
    ok = rows if "status" not in rows else rows[rows["status"] == "ok"]
    for label, text in zip(ok["label"].astype(str), ok[COLUMN], strict=True):
        for cell, (exact, total) in parse_grid(text).items():
            acc = out.setdefault(label, {}).setdefault(cell, [0, 0])
            acc[0] += exact
            acc[1] += total
    return {k: v for k, v in out.items() if v}


def operand_figure(meta: dict[str, Any], grids: dict[str, dict[tuple[int, int], list[int]]]) -> Any:
    """One panel per row label: exact match by (first, second) operand digits on [0, 1]."""
    labels = sorted(grids)
    top = max(max(max(a, b) for a, b in g) for g in grids.values())
    fig, axes = panels(len(labels), PANELS_PER_LINE, (2.6, 2.6), (1.0, 0.9))
    image = None
    for ax, label in zip(axes, labels, strict=True):
        values = [[math.nan] * top for _ in range(top)]
        for (a, b), (exact, total) in grids[label].items():
            values[a - 1][b - 1] = exact / total if total else math.nan
        image = ax.imshow(values, cmap="viridis", vmin=0.0, vmax=1.0, origin="lower",
                          extent=(0.5, top + 0.5, 0.5, top + 0.5))  # fmt: skip
        train = int(meta.get("train_length") or 0)
        if 0 < train <= top:  # the training digits, outlined
            ax.plot([0.5, train + 0.5, train + 0.5], [train + 0.5, train + 0.5, 0.5], "w--", lw=1)
        ax.set_title(label, fontsize=8)
        ax.set_xlabel("second operand (digits)", fontsize=7)
        ax.set_ylabel("first operand (digits)", fontsize=7)
        ax.tick_params(labelsize=6)
    colour_bar(fig, image, "exact match")
    head = f"{meta.get('task')} · model {meta.get('model')} · trained at up to"
    # The figure's own title: each panel's title is its row label.
    fig.suptitle(f"{head} {meta.get('train_length')} digits · exact match", fontsize=8)
    return fig


def operand_figures(rows: pd.DataFrame | None) -> Figures:
    """An operand-length heatmap per (task, model, training digits) whose rows have grids."""
    if rows is None or COLUMN not in rows or "label" not in rows:
        return []
    out: Figures = []
    keys = ["task", "model", "train_length"]
    for key, part in rows.dropna(subset=[COLUMN]).groupby(keys):
        meta = dict(zip(keys, key, strict=True))
        grids = operand_grids(part)
        if grids:
            out.append((slug("operands", meta, "exact_match"), operand_figure(meta, grids)))
    return out
