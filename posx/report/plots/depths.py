"""RULER's depth x length heatmap: for each model and variant, the score of its needle tasks
(``niah_*`` and ``vt``) by where the queried needle sat and by length, the picture of where in
its context a model stops retrieving.

RULER rows carry ``depth_grid``, JSON ``{"depth percent": [summed sample scores, samples]}``
(:mod:`posx.pretrained.ruler.suite`); this module sums them over a row label's tasks into bands
of 10 % depth (a handful of samples per depth would be noise) and draws one panel per label.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from posx.report.plots.figures import Figures, colour_bar, panels, slug

COLUMN = "depth_grid"
BANDS = 10  # depth bands of 10 % each; 100 % falls in the last
PANELS_PER_LINE = 3


def parse_depths(text: object) -> dict[int, tuple[float, int]]:
    """``{depth: (score sum, samples)}`` from one row's cell; empty for a missing or damaged
    cell (a damaged file must not stop the report)."""
    if not isinstance(text, str) or not text:
        return {}
    try:
        raw = json.loads(text)
    except ValueError:
        return {}
    out = {}
    for key, value in raw.items() if isinstance(raw, dict) else []:
        ok = isinstance(value, list) and len(value) == 2 and str(key).isdigit()
        if not ok or not all(isinstance(v, int | float) and v >= 0 for v in value):
            continue
        if int(key) > 100 or value[0] > value[1]:
            continue
        out[int(key)] = (float(value[0]), int(value[1]))
    return out


def depth_grids(rows: pd.DataFrame) -> dict[str, dict[tuple[int, int], list[float]]]:
    """Row label -> ``{(band, length): [score sum, samples]}`` over its tasks (and seeds)."""
    out: dict[str, dict[tuple[int, int], list[float]]] = {}
    ok = rows if "status" not in rows else rows[rows["status"] == "ok"]
    cells = zip(ok["label"].astype(str), ok["eval_length"], ok[COLUMN], strict=True)
    for label, length, text in cells:
        for depth, (total, n) in parse_depths(text).items():
            band = min(depth * BANDS // 100, BANDS - 1)
            acc = out.setdefault(label, {}).setdefault((band, int(length)), [0.0, 0])
            acc[0] += total
            acc[1] += n
    return {k: v for k, v in out.items() if v}


def depth_figure(meta: dict[str, Any], grids: dict[str, dict[tuple[int, int], list[float]]]) -> Any:
    """One panel per row label: score in percent by depth band (rows) and length (columns)."""
    labels = sorted(grids)
    fig, axes = panels(len(labels), PANELS_PER_LINE, (3.2, 3.0), (1.2, 1.0))
    image = None
    for ax, label in zip(axes, labels, strict=True):
        lengths = sorted({length for _, length in grids[label]})
        values = [[math.nan] * len(lengths) for _ in range(BANDS)]
        for (band, length), (total, n) in grids[label].items():
            values[band][lengths.index(length)] = 100 * total / n if n else math.nan
        image = ax.imshow(values, cmap="viridis", vmin=0.0, vmax=100.0, aspect="auto",
                          origin="upper")  # fmt: skip
        for b in range(BANDS):
            for j in range(len(lengths)):
                if not math.isnan(values[b][j]):
                    ink = "k" if values[b][j] > 60 else "w"
                    ax.text(j, b, f"{values[b][j]:.0f}", ha="center", va="center",
                            fontsize=6, color=ink)  # fmt: skip
        ax.set_xticks(range(len(lengths)), [str(x) for x in lengths], fontsize=6)
        ax.set_yticks(range(BANDS), [f"{10 * b}-{10 * b + 10}%" for b in range(BANDS)],
                      fontsize=6)  # fmt: skip
        ax.set_title(label, fontsize=8)
        ax.set_xlabel("length (tokens)", fontsize=7)
        ax.set_ylabel("depth of the queried needle", fontsize=7)
    colour_bar(fig, image, "score (%)")
    fig.suptitle(f"RULER needle tasks by depth · model {meta.get('model')}", fontsize=8)
    return fig


def depth_figures(rows: pd.DataFrame | None) -> Figures:
    """A depth x length heatmap per model kind whose RULER rows have depth grids."""
    if rows is None or COLUMN not in rows or "label" not in rows:
        return []
    out: Figures = []
    for model, part in rows.dropna(subset=[COLUMN]).groupby("model"):
        meta = {"task": "ruler-depths", "model": model}
        grids = depth_grids(part)
        if grids:
            out.append((slug("heatmap", meta, "score"), depth_figure(meta, grids)))
    return out
