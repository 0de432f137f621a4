"""How the plots look: one colour per row (encodings keep theirs from report to report, each
variant gets its own), axes that suit the metric, titles and labels that fit, integer length
ticks, legends that never cover the data.

Only the plot modules draw (:mod:`posx.report.plots.figures` and its siblings); this module holds
the choices, so they read in one place.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# tab10, then the light tab20 shades: distinct on screen and in print.
PALETTE = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5",
    "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5",
]  # fmt: skip
# Fixed slots for the encodings posx ships, so each keeps its colour from report to report.
KNOWN = [
    "nope", "sinusoidal", "rope", "alibi", "t5", "learned", "kerple_log", "kerple_power",
    "fire", "xpos", "cope", "sandwich", "shaw", "transformer_xl", "deberta", "dynamic_bias",
    "floater", "complex_order", "alibi_learned",
]  # fmt: skip
STYLES = ["-", "--", ":", "-."]
# Characters of title per inch of figure width at the title's font size (9 pt: ~11/inch).
CHARS_PER_INCH = {9: 11.5, 8: 13.0, 7: 15.0}
RULE = "rule"  # gid of lines that span the axes (the training length): no data under them


def encoding_colors(names: Iterable[str]) -> dict[str, str]:
    """One colour per encoding: fixed slots for posx's own, the rest in sorted order.

    Other encodings take the colours no encoding of this report uses, so every encoding in one
    report (all its plots) has its own colour while there are no more than 20.
    """
    names = set(names)
    colors = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(KNOWN)}
    taken = {colors[n] for n in names & set(KNOWN)}
    free = [c for c in PALETTE if c not in taken] or PALETTE
    for i, name in enumerate(sorted(names - set(KNOWN))):
        colors[name] = free[i % len(free)]
    return colors


def row_colors(rows: Mapping[str, str]) -> dict[str, str]:
    """One colour per row label (``{label: encoding}``), the same in every plot of a report.

    An encoding's plain row (labelled as the encoding, else its first label) keeps the
    encoding's colour; its other rows (eval-time variants such as ``rope+yarn×4``, ``--by``
    values) take colours no encoding of the report uses, so no two rows share a colour while
    the palette lasts.
    """
    base = encoding_colors(set(rows.values()))
    out: dict[str, str] = {}
    extra: list[str] = []
    for enc in sorted(set(rows.values())):
        labels = sorted(label for label, e in rows.items() if e == enc)
        plain = enc if enc in labels else labels[0]
        out[plain] = base[enc]
        extra += [label for label in labels if label != plain]
    taken = set(out.values())
    free = [c for c in PALETTE if c not in taken] or PALETTE
    for i, label in enumerate(sorted(extra)):
        out[label] = free[i % len(free)]
    return out


def line_styles(rows: Sequence[str], encodings: Mapping[str, str]) -> dict[str, str]:
    """Line style per row: rows of one encoding also differ by dash (readable in print)."""
    seen: dict[str, int] = {}
    out = {}
    for row in rows:
        enc = encodings[row]
        out[row] = STYLES[seen.get(enc, 0) % len(STYLES)]
        seen[enc] = seen.get(enc, 0) + 1
    return out


def is_fraction(metric: str) -> bool:
    """Accuracies and exact match: values in [0, 1]."""
    return metric.split("/")[0].startswith(("acc", "exact"))


def value_limits(metric: str) -> tuple[float, float] | None:
    """The fixed range of a metric's axis or colour bar: [0, 1] for fractions, else None."""
    return (0.0, 1.0) if is_fraction(metric) else None


def fraction_axis(ax: Any, metric: str) -> None:
    """A y-axis of [0, 1] (with a little room for markers) for a fraction metric."""
    if metric.split("/")[0].endswith("above_chance"):
        ax.set_ylim(top=1.03)  # below chance is negative: let the data set the bottom
    elif is_fraction(metric):
        ax.set_ylim(-0.03, 1.03)


def fit_title(ax: Any, text: str, width_in: float, fontsize: int = 9) -> None:
    """Sets a title wrapped to the figure's width, so no part of it is clipped."""
    chars = max(20, int(width_in * CHARS_PER_INCH.get(fontsize, 11.5)))
    ax.set_title(textwrap.fill(text, chars, break_on_hyphens=False), fontsize=fontsize)


def fit_label(text: str, length_in: float, fontsize: int = 8) -> str:
    """``text`` wrapped to lines of at most ``length_in`` inches (a colour bar's label runs along
    the bar: one line longer than the figure is clipped at its edge). A label that needs two
    lines breaks before its unit first: ``exact_match`` / ``[fraction of sequences]``."""
    chars = max(8, int(length_in * CHARS_PER_INCH.get(fontsize, 13.0)))
    if len(text) <= chars:
        return text
    name, bracket, rest = text.partition(" [")
    parts = [name, f"[{rest}"] if bracket else [text]
    return "\n".join(textwrap.fill(part, chars, break_on_hyphens=False) for part in parts)


def place_legend(ax: Any, fontsize: int = 7) -> None:
    """The legend inside the axes where it covers no plotted point or line (matplotlib's
    ``best``), else below the plot, in as many columns as the figure's width holds."""
    legend = ax.legend(fontsize=fontsize, loc="best")
    fig = ax.get_figure()
    fig.draw_without_rendering()  # the layout places the axes and the legend
    box = legend.get_window_extent()
    if not _covers(box, _data_points(ax)):
        return
    legend.remove()
    handles, labels = ax.get_legend_handles_labels()
    ncols = max(1, min(len(labels), int(0.95 * fig.bbox.width // max(box.width, 1.0))))
    rows = math.ceil(len(labels) / ncols)
    # Keep the plot's own height: the legend's rows are added below it (7 pt: ~0.16 in a row).
    fig.set_figheight(fig.get_figheight() + 0.16 * rows + 0.1)
    fig.legend(handles, labels, loc="outside lower center", ncols=ncols, fontsize=fontsize)


def _data_points(ax: Any) -> Any:
    """Display coordinates of every drawn line's points and of points along its segments."""
    import numpy as np

    out = [np.empty((0, 2))]
    for line in ax.lines:
        if line.get_gid() == RULE or not len(line.get_xydata()):
            continue
        xy = line.get_transform().transform(line.get_xydata())
        xy = xy[np.isfinite(xy).all(axis=1)]
        steps = np.linspace(0.0, 1.0, 25)[:, None]
        out += [xy, *(a + steps * (b - a) for a, b in zip(xy[:-1], xy[1:], strict=True))]
    return np.concatenate(out)


def _covers(box: Any, points: Any) -> bool:
    """Whether display-space box ``box`` holds any of ``points`` (``[n, 2]``)."""
    x, y = points[:, 0], points[:, 1]
    return bool(((box.x0 <= x) & (x <= box.x1) & (box.y0 <= y) & (y <= box.y1)).any())


def log2_positions(ax: Any, largest: float) -> None:
    """A log2 position axis with ticks at 1, 2, 4, ... only (never 0.5: positions are
    integers)."""
    ticks = [2**k for k in range(0, max(1, math.ceil(math.log2(max(largest, 2)))) + 1)]
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()


def integer_axis(axis: Any) -> None:
    """Ticks at whole numbers only (steps, positions on a linear axis)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))
