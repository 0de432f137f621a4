"""The per-position plot: the table's metric per position bucket at each row's longest eval
length, a band for how far each bucket's value moves by chance, and under it the scored tokens
each bucket holds, so a zigzag over a handful of tokens does not read as signal.

What the band is (``data.bucket_stats``) is written under the plot: ± 2 standard errors
over seeds, a Wilson interval from one run's token count (token accuracy), or no band where
``eval_positions.csv`` records no spread (one run's loss).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import Any

import pandas as pd

from posx.report.plots.data import bucket_stats
from posx.report.plots.figures import HEIGHT, WIDTH, figure, train_lines
from posx.report.plots.style import (
    CHARS_PER_INCH,
    fit_title,
    fraction_axis,
    integer_axis,
    line_styles,
    log2_positions,
    place_legend,
)
from posx.report.tables import title
from posx.report.units import metric_label

COUNTS_HEIGHT = 1.1  # inches added under the plot for the token counts


def longest_buckets(part: pd.DataFrame) -> pd.DataFrame:
    """Each row's buckets at its longest eval length, with a ``row`` column."""
    part = part.copy()
    if "value" not in part:  # rows without a table behind them: plot the loss
        part = part.assign(value=part["loss"], metric="loss", table_metric="loss")
    part["row"] = part["label"] if "label" in part else part["variant"]
    longest = part.groupby("row")["eval_length"].transform("max")
    return part[part["eval_length"] == longest]


def positions_figure(
    meta: dict[str, Any], part: pd.DataFrame, by: Sequence[str], colors: dict[str, str]
) -> Any:
    """The table's metric per position bucket (``data.position_values``) with its band,
    each row at its longest eval length, over a panel of the scored tokens per bucket.

    Causal attention makes position p's loss depend on tokens 0..p only, so a row that stops
    at a shorter length (unsupported beyond it) still shows the positions it reached.
    """
    part = longest_buckets(part)
    encodings = dict(zip(part["row"], part["encoding"], strict=True))
    rows = sorted(encodings)
    styles = line_styles(rows, encodings)
    fig = figure(WIDTH, HEIGHT + COUNTS_HEIGHT)
    ax, counts = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    stats = {row: bucket_stats(part[part["row"] == row]) for row in rows}
    alpha = 0.18 * min(1.0, 4 / len(rows))  # many rows' bands overlap: keep the lines legible
    for row in rows:
        _draw_row(ax, stats[row], colors[row], styles[row], row, alpha)
    widths = part["bucket_end"] - part["bucket_start"]
    log = widths.nunique() > 2  # power-of-two buckets (eval.buckets=log)
    _token_panel(counts, stats, colors, log)
    for axes, label in ((ax, True), (counts, False)):
        train_lines(axes, part["train_length"], label=label)
    if log:  # equal room per bucket
        log2_positions(ax, float(part["bucket_end"].max()))
    else:
        integer_axis(ax.xaxis)
    drawn = "/".join(sorted(set(part["metric"])))
    _labels(ax, counts, meta, part, drawn)
    fig.supxlabel(_band_note(stats, drawn), fontsize=7, color="0.3")
    place_legend(ax)
    return fig


def _draw_row(ax: Any, stats: pd.DataFrame, color: str, style: str, row: str, alpha: float) -> None:
    """One row's line and, where its buckets have one, its band."""
    ax.plot(stats["mid"], stats["mean"], color=color, ls=style, marker="o", ms=3, label=row)
    banded = stats[stats["low"].notna()]
    if len(banded):
        ax.fill_between(banded["mid"], banded["low"], banded["high"], color=color, alpha=alpha,
                        lw=0)  # fmt: skip


def _token_panel(
    ax: Any, stats: dict[str, pd.DataFrame], colors: dict[str, str], log: bool
) -> None:
    """Scored tokens per bucket (per run): grey bars when the rows agree on every bucket they
    share (rows evaluated on the same sequences), else one thin line per row in its colour."""
    every = pd.concat(stats.values())
    buckets = ["bucket_start", "bucket_end"]
    s = every.drop_duplicates(buckets).sort_values("bucket_start")
    if every.groupby(buckets)["tokens"].nunique().max() == 1 and s["bucket_start"].is_unique:
        # A log axis has no 0: the first bucket [0, e) is drawn from e/4, around its point e/2.
        left = s["bucket_start"].where(~(log & (s["bucket_start"] == 0)), s["bucket_end"] / 4)
        bars = ax.bar(left, s["tokens"], width=s["bucket_end"] - left, align="edge",
                      color="0.7", edgecolor="white", lw=0.8)  # fmt: skip
        ax.bar_label(bars, [f"{t:.0f}" for t in s["tokens"]], fontsize=6, color="0.3")
    else:
        for row, one in stats.items():
            ax.plot(one["mid"], one["tokens"], color=colors[row], marker=".", ms=3, lw=0.8)
    ax.set_yscale("log")
    tokens = pd.concat([s["tokens"] for s in stats.values()])
    # Bars of a log axis start at its bottom: a decade below the fewest tokens, so a bucket of
    # 4 tokens still shows a bar; room above the most for the count written on top.
    ax.set_ylim(10 ** math.floor(math.log10(tokens.min() / 2)), tokens.max() * 4)
    ax.set_ylabel("tokens\nper run", fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(alpha=0.3)


def _labels(ax: Any, counts: Any, meta: dict[str, Any], part: pd.DataFrame, drawn: str) -> None:
    """Axis labels, the metric's axis range and the title (which says at which length)."""
    lengths = sorted(set(part["eval_length"]))
    at = f"L={lengths[0]}" if len(lengths) == 1 else "each row's longest eval length"
    shown = "/".join(sorted(set(part["table_metric"])))
    fraction_axis(ax, drawn)
    counts.set_xlabel("position (tokens)")
    ax.set_ylabel(metric_label(drawn))
    note = "" if drawn == shown else f" ({shown} has no per-position value)"
    fit_title(ax, f"{title({**meta, 'metric': drawn})} · per position at {at}{note}", WIDTH)
    ax.grid(alpha=0.3)


def _band_note(stats: dict[str, pd.DataFrame], drawn: str) -> str:
    """What the bands are, one clause per kind the rows have (``data.bucket_stats``)."""
    kinds = pd.concat([s[["band", "runs"]] for s in stats.values()])
    parts = []
    seeds = sorted(set(kinds.loc[kinds["band"] == "seeds", "runs"]))
    if seeds:
        n = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"
        parts.append(f"band: mean ± 2 SE over {n} seeds")
    if (kinds["band"] == "tokens").any():
        parts.append(
            "band for one run: Wilson interval (z=2) of the bucket's tokens, taken as "
            "independent (tokens of one sequence are not: the noise is at least this)"
        )
    if (kinds["band"] == "none").any():
        parts.append(
            f"no band for one run's {drawn}: eval_positions.csv records each bucket's mean "
            "and token count, not its spread; read it against the tokens per bucket"
        )
    chars = int(WIDTH * CHARS_PER_INCH[7])
    return textwrap.fill("; ".join(parts), chars, break_on_hyphens=False)
