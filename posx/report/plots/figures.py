"""Figures (matplotlib, Agg canvas, no display): metric vs eval length, encodings x lengths
heatmap, training curves (the per-position plot is :mod:`posx.report.plots.positions`). Each row
keeps one colour in every figure (:mod:`posx.report.plots.style`); a plot that would be empty is
left out with its reason.

matplotlib is the optional ``plots`` extra, imported only when a figure is drawn.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from posx.errors import PosxError
from posx.report.data import lower_is_better
from posx.report.plots.style import (
    RULE,
    fit_label,
    fit_title,
    fraction_axis,
    integer_axis,
    line_styles,
    place_legend,
    value_limits,
)
from posx.report.tables import WideTable, length_unit, row_label, title
from posx.report.units import fixed, metric_label, unit

Figures = list[tuple[str, Any]]


def figure(width: float = 6.4, height: float = 4.0) -> Any:
    """A Figure bound to the Agg canvas (never pyplot, so no display or global state)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:
        raise PosxError(
            "plots need matplotlib: pip install 'posx[plots]' (make install includes it)"
        ) from err
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def panels(
    count: int, per_line: int, size: tuple[float, float], margin: tuple[float, float]
) -> tuple[Any, list[Any]]:
    """A figure of ``count`` panels, ``per_line`` to a line: each panel ``size`` (width,
    height) inches, plus ``margin`` for the colour bar and titles. Returns it and its axes."""
    cols = min(per_line, count)
    lines = math.ceil(count / cols)
    fig = figure(margin[0] + size[0] * cols, margin[1] + size[1] * lines)
    return fig, [fig.add_subplot(lines, cols, i + 1) for i in range(count)]


def colour_bar(fig: Any, image: Any, label: str) -> None:
    """One colour bar for every panel of ``fig`` (none when nothing was drawn)."""
    if image is not None:
        fig.colorbar(image, ax=fig.axes, shrink=0.8).set_label(label, fontsize=8)


def _log2_lengths(ax: Any, lengths: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(lengths), [str(x) for x in lengths])
    ax.minorticks_off()


def train_lines(ax: Any, lengths: Iterable[int], label: bool = True) -> None:
    """A dotted rule at each training length (the first one labelled, when ``label``)."""
    for i, length in enumerate(sorted(set(lengths))):
        name = "training length" if i == 0 and label else None
        ax.axvline(length, color="0.4", ls=":", lw=1, label=name, gid=RULE)


WIDTH, HEIGHT = 6.4, 4.0  # inches; the HTML page scales them to its column


def length_figure(t: WideTable, colors: dict[str, str]) -> Any:
    """Metric vs eval length (log2 axis), one line per row, band = mean ± std over seeds."""
    fig = figure(WIDTH, HEIGHT)
    ax = fig.add_subplot()
    styles = line_styles(t.rows, t.encodings)
    for row in t.rows:
        cells = [(x, t.cell(row, x)) for x in t.lengths]
        ok = [(x, c) for x, c in cells if c.n]
        color = colors[row]
        missing = [x for x, c in cells if c.status in ("unsupported", "failed")]
        label = row_label(t, row)
        label += f" (no value at {', '.join(map(str, missing))})" if missing else ""
        xs = [x for x, _ in ok]
        means = [c.mean for _, c in ok]
        # A run that did not learn its task stays visible, dotted and faded (it ranks last).
        faded = {"ls": ":", "alpha": 0.45} if row in t.not_learned else {"ls": styles[row]}
        ax.plot(xs, means, marker="o", ms=4, color=color, label=label, **faded)
        spread = [(x, c.mean, c.std) for x, c in ok if c.n > 1 and not math.isnan(c.std)]
        if spread:
            ax.fill_between(
                [s[0] for s in spread],
                [s[1] - s[2] for s in spread],
                [s[1] + s[2] for s in spread],
                color=color,
                alpha=0.18,
                lw=0,
            )
        if missing:  # mark where the encoding could not run, on the axis edge
            ax.plot(missing, [0.02] * len(missing), "x", color=color, ms=7,
                    transform=ax.get_xaxis_transform(), clip_on=False)  # fmt: skip
    train_lines(ax, t.train_lengths.values())
    _log2_lengths(ax, t.lengths)
    fraction_axis(ax, t.metric)
    ax.set_xlabel(f"eval length ({length_unit(t.meta)})")
    ax.set_ylabel(metric_label(t.metric))
    fit_title(ax, title(t.meta), WIDTH)
    ax.grid(alpha=0.3)
    place_legend(ax)
    return fig


def table_decimals(values: Iterable[float], significant: int = 3) -> int:
    """Decimals that show the table's largest value with ``significant`` digits, used for every
    cell of the table (``3.70`` beside ``3.36``, never ``3.7``; ``0.963`` beside ``0.002``)."""
    finite = [abs(v) for v in values if math.isfinite(v) and v != 0]
    if not finite:
        return significant - 1
    return max(0, significant - 1 - math.floor(math.log10(max(finite))))


def heatmap_figure(t: WideTable, colors: dict[str, str]) -> Any:
    """Rows x eval lengths coloured by the mean, the best cells brightest (viridis' yellow draws
    the eye), whichever way the metric is better; cells with no value hatched.

    Fractions (accuracy, exact match) are coloured on [0, 1], so a table of zeros reads as 0.
    """
    width = max(4.0, 1.6 + 0.9 * len(t.lengths) + 0.06 * max(len(r) for r in t.rows))
    height = 1.4 + 0.4 * max(len(t.rows), 4)  # room for the colour bar's label
    fig = figure(width, height)
    ax = fig.add_subplot()
    values = [
        [t.cell(r, x).mean if t.cell(r, x).n else math.nan for x in t.lengths] for r in t.rows
    ]
    # viridis runs dark -> bright: reversed for a lower-is-better metric, so low = bright.
    cmap = "viridis_r" if lower_is_better(t.metric.split("/")[0]) else "viridis"
    vmin, vmax = value_limits(t.metric) or (None, None)
    image = ax.imshow(values, cmap=cmap, aspect="auto", vmin=vmin, vmax=vmax)
    ax.set_facecolor("white")  # no value: blank and hatched, never a bright "good" colour
    decimals = table_decimals([v for row in values for v in row])
    for i, row in enumerate(t.rows):
        for j, length in enumerate(t.lengths):
            cell = t.cell(row, length)
            if cell.n:
                r, g, b, _ = image.cmap(image.norm(cell.mean))
                ink = "k" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "w"
                ax.text(j, i, fixed(cell.mean, decimals), ha="center", va="center", fontsize=7,
                        color=ink)  # fmt: skip
            else:
                ax.add_patch(_hatch(j, i))
                text = "—" if cell.status == "missing" else cell.status
                ax.text(j, i, text, ha="center", va="center", fontsize=6, color="0.2")
    ax.set_xticks(range(len(t.lengths)), [str(x) for x in t.lengths])
    ax.set_yticks(range(len(t.rows)), [row_label(t, r) for r in t.rows], fontsize=7)
    for tick, row in zip(ax.get_yticklabels(), t.rows, strict=True):
        tick.set_color(colors[row])
    ax.set_xlabel(f"eval length ({length_unit(t.meta)})")
    fit_title(ax, title(t.meta), width, fontsize=8)
    bar = fig.colorbar(image, ax=ax)
    # Along the bar, the label has the plot's height less the title and the length axis.
    bar.set_label(fit_label(metric_label(t.metric), height - 1.1), fontsize=8)
    return fig


def _hatch(x: float, y: float) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, hatch="//", ec="0.6", lw=0)


def training_figure(meta: dict[str, Any], part: pd.DataFrame, colors: dict[str, str]) -> Any:
    """Training loss vs step, one line per row label, band = ± std over seeds."""
    fig = figure(WIDTH, HEIGHT)
    ax = fig.add_subplot()
    for row, runs in sorted(part.groupby(training_key(part)), key=lambda kv: str(kv[0])):
        stats = runs.groupby("step")["loss"].agg(["mean", "std", "count"]).reset_index()
        color = colors.get(str(row), colors.get(str(runs["encoding"].iloc[0]), "0.3"))
        ax.plot(
            stats["step"],
            stats["mean"],
            color=color,
            marker="o" if len(stats) < 3 else None,  # one or two logged steps: still visible
            ms=3,
            label=f"{row} (n={runs['run_dir'].nunique()})",
        )
        if (stats["count"] > 1).any():
            std = stats["std"].fillna(0)
            ax.fill_between(stats["step"], stats["mean"] - std, stats["mean"] + std,
                            color=color, alpha=0.18, lw=0)  # fmt: skip
    integer_axis(ax.xaxis)
    ax.set_xlabel("step")
    ax.set_ylabel(f"training loss [{unit('loss')}]")
    trained = f"trained at {meta['train_length']} {length_unit(meta)}"
    text = f"{meta['task']} · model {meta['model']} · {trained}"
    fit_title(ax, f"training loss · {text}", WIDTH)
    ax.grid(alpha=0.3)
    place_legend(ax)
    return fig


def training_key(part: pd.DataFrame) -> str:
    """The column whose values name the training curves: ``label`` when every row has one,
    else ``encoding``. One line per row label (a configuration), never an average over
    different configurations."""
    return "label" if "label" in part and part["label"].notna().all() else "encoding"


def slug(kind: str, meta: dict[str, Any], metric: str = "") -> str:
    """A file stem such as ``length_copy_tiny_L16_full_exact_match``."""
    parts = [kind, meta.get("task"), meta.get("model"), meta.get("train_length"), meta.get("mode")]
    if parts[3] is not None:
        parts[3] = f"L{parts[3]}"
    text = "_".join(str(p) for p in [*parts, metric] if p not in (None, ""))
    return re.sub(r"[^A-Za-z0-9._=+-]+", "-", text).strip("-")


def render(fig: Any, fmt: str) -> bytes:
    """The figure as PNG or SVG bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, dpi=150 if fmt == "png" else None, metadata=_metadata(fmt))
    return buffer.getvalue()


def _metadata(fmt: str) -> dict[str, Any]:
    # No creation date in SVGs, so re-running a report on the same results gives the same file.
    return {"Date": None} if fmt == "svg" else {}


def write_plots(figs: Figures, out_dir: Path) -> list[Path]:
    """Writes every figure as ``<stem>.png`` and ``<stem>.svg`` (atomically); returns the paths."""
    from posx.storage.results import atomic_write

    paths = []
    for stem, fig in figs:
        for fmt in ("png", "svg"):
            path = out_dir / f"{stem}.{fmt}"
            atomic_write(path, render(fig, fmt))
            paths.append(path)
    return paths
