"""``posx report``: results below a root -> tables, ranking, exports and plots.

Modules: ``data`` (loading, filters, metric choice, degradation ratio), ``configs`` (config
fingerprints, duplicates, ``--where``), ``labels`` (row labels, ``--by``, notes on differing
settings), ``units``, ``tables`` (summary and wide tables), ``rank`` (mean reciprocal rank across
tasks), ``export`` (rich, Markdown, LaTeX, CSV), ``html`` (one self-contained page) and ``plots``
(matplotlib figures).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from posx.errors import ConfigError
from posx.report.chance import LEARNED, check_thresholds, unknown_chance
from posx.report.configs import drop_duplicate_runs, parse_where
from posx.report.configs import where as where_rows
from posx.report.data import load_evals, load_positions, load_training, metric_by_task, select
from posx.report.export import section_markdown, to_csv, to_latex, to_markdown, to_rich
from posx.report.html import to_html
from posx.report.labels import label_rows, parse_by
from posx.report.plot_set import Plots, figures
from posx.report.plots import render as render_figure
from posx.report.plots_data import position_values, run_labels
from posx.report.provenance import provenance
from posx.report.rank import RANK_LENGTHS, rank_table
from posx.report.tables import Section, WideTable, pivot, summarize

FORMATS = {"rich": "rich", "md": "md", "markdown": "md", "csv": "csv", "latex": "latex",
           "tex": "latex", "html": "html"}  # fmt: skip
SUFFIXES = {".md": "md", ".markdown": "md", ".csv": "csv", ".tex": "latex", ".html": "html",
            ".htm": "html"}  # fmt: skip

__all__ = [
    "Report",
    "Section",
    "make_report",
    "metric_by_task",
    "output_format",
    "pivot",
    "render",
    "report_figures",
    "report_plots",
    "rich_renderables",
    "summarize",
    "to_csv",
    "to_latex",
    "to_markdown",
    "to_rich",
]


@dataclass
class Report:
    """Everything one ``posx report`` call shows, computed once for every format."""

    summary: pd.DataFrame
    tables: list[WideTable]
    rank: pd.DataFrame | None
    positions: pd.DataFrame | None = None
    training: pd.DataFrame | None = None
    by: list[str] = field(default_factory=list)
    rank_lengths: str = "ood"
    learned: float = LEARNED
    digits: int = 3
    ratio: bool = True
    figures: Plots | None = None  # drawn on first use, shared by --plot and the HTML page
    warnings: list[str] = field(default_factory=list)  # e.g. duplicate runs; print on stderr
    root: Path | None = None
    rows: pd.DataFrame | None = None  # the labelled eval rows shown (for the provenance)
    sections: list[Section] = field(default_factory=list)  # e.g. the claims' verdicts


def make_report(
    root: Path,
    metric: str = "auto",
    tasks: Sequence[str] | None = None,
    encodings: Sequence[str] | None = None,
    modes: Sequence[str] | None = None,
    variants: Sequence[str] | None = None,
    by: Sequence[str] | None = None,
    rank: bool | None = None,
    rank_lengths: str = "ood",
    digits: int = 3,
    ratio: bool = True,
    where: Sequence[str] | None = None,
    learned: float = LEARNED,
    learned_loss: float | None = None,
) -> Report:
    """Loads, filters and summarises every result below ``root``.

    Runs are grouped by their whole configuration: a duplicate run (same config fingerprint and
    seed) is dropped with a warning, keeping the newest; rows that share a label but not a
    configuration are kept apart, and each table notes the settings its rows differ in.

    Args:
        root: Results root; every run directory below it counts.
        metric: ``auto`` or a metric column (see ``metric_by_task``).
        tasks, encodings, modes, variants: Filters (see ``data.select``).
        by: Compared inside one table: model, train_length, task, mode, seed, or any config
            key (``train.steps``).
        rank: Include the mean-reciprocal-rank table; None = when 2+ tasks are shown.
        rank_lengths: ``ood`` (eval lengths past training) or ``all``.
        digits: Decimals in the tables.
        ratio: Show each cell's metric relative to the same run at its training length.
        where: ``KEY=VALUE`` filters on any config key or eval column
            (``model.d_model=128``); all must hold.
        learned: A row whose accuracy-like metric at its training length (above chance) is
            below this is marked ``not learned`` and left out of the ranking; 0 = off.
        learned_loss: The same for lower-is-better metrics (loss, bpb): marked when above
            this; None = off.
    """
    check_thresholds(learned, learned_loss)
    if rank_lengths not in RANK_LENGTHS:
        raise ConfigError(f"unknown --rank-lengths {rank_lengths!r}; choose from ood, all")
    if not 0 <= digits <= 10:
        raise ConfigError(f"--digits must be between 0 and 10, got {digits}")
    frame = load_evals(root)
    by_cols = parse_by(by, frame)
    filters = parse_where(where, frame)
    frame = where_rows(select(frame, tasks, encodings, modes, variants), filters)
    if frame.empty:
        raise ConfigError(f"no eval rows under {root} match the filters")
    frame, warnings = drop_duplicate_runs(frame)
    unsaved = sorted(set(frame.loc[frame["fingerprint"] == "", "run_dir"]))
    if unsaved:
        warnings.append(
            f"{len(unsaved)} run(s) have no saved config (.hydra/config.yaml), so runs that "
            f"differ in config cannot be told apart: {', '.join(unsaved[:3])}"
            + (" ..." if len(unsaved) > 3 else "")
        )
    old = unknown_chance(frame)
    warnings += [old] if old else []
    frame, remarks = label_rows(frame, by_cols)
    summary = summarize(frame, metric, by_cols, learned, learned_loss)
    tables = pivot(summary, by_cols, remarks)
    show_rank = rank if rank is not None else frame["task"].nunique() > 1
    runs = set(frame["run_dir"])
    positions = load_positions(root)
    if positions is not None:
        positions = select(positions, tasks, encodings, modes, variants, strict=False)
        positions = positions[positions["run_dir"].isin(runs)]
        if "status" in positions:
            positions = positions[positions["status"] == "ok"]
        positions = position_values(positions, frame, metric_by_task(frame, metric))
    training = load_training(root)
    if training is not None:
        training = training[training["run_dir"].isin(runs)]
        training = training.assign(label=training["run_dir"].map(run_labels(frame)))
    return Report(
        summary=summary,
        tables=tables,
        rank=rank_table(tables, rank_lengths) if show_rank else None,
        positions=positions,
        training=training,
        by=by_cols,
        rank_lengths=rank_lengths,
        learned=learned,
        digits=digits,
        ratio=ratio,
        warnings=warnings,
        root=root,
        rows=frame,
    )


def output_format(fmt: str | None, output: Path | None) -> str:
    """The export format: ``--format``, else the output file's suffix, else rich."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise ConfigError(f"unknown --format {fmt!r}; choose from rich, md, csv, latex, html")
        return FORMATS[fmt]
    if output is not None:
        return SUFFIXES.get(output.suffix.lower(), "md")
    return "rich"


def report_plots(report: Report) -> Plots:
    """Every plot of the report (file stem, matplotlib Figure) and the reasons for those left
    out, drawn once per report."""
    if report.figures is None:
        report.figures = figures(report.tables, report.positions, report.training, report.by)
    return report.figures


def report_figures(report: Report) -> list:
    """Every plot of the report as (file stem, matplotlib Figure), drawn once per report."""
    return report_plots(report).figures


def render(report: Report, fmt: str, rank_csv: bool = False, base: Path | None = None) -> str:
    """The report as text in ``md``, ``csv``, ``latex`` or ``html`` (plots embedded).

    ``csv`` is the long summary, one row per cell, or with ``rank_csv`` the ranking table
    (one row per variant: mrr, tasks, rank per scenario). ``base`` is the directory an HTML
    page is written to: its links to each run's config are relative to it (absolute without).
    """
    opts = {"which": report.rank_lengths, "digits": report.digits, "ratio": report.ratio}
    if fmt == "csv" and rank_csv:
        if report.rank is None:
            raise ConfigError("no ranking to write; pass --rank")
        return to_csv(report.rank)
    if fmt == "md":
        text = to_markdown(report.tables, report.rank, **opts)
        return "\n".join([text, *(section_markdown(s) for s in report.sections)])
    if fmt == "latex":
        return to_latex(report.tables, report.rank, **opts)
    if fmt == "csv":
        return to_csv(report.summary)
    if fmt == "html":
        plots = report_plots(report)
        figs = [(stem, render_figure(fig, "svg")) for stem, fig in plots.figures]
        origin = None
        if report.root is not None and report.rows is not None:
            origin = provenance(report.root, report.rows)
        return to_html(
            report.tables,
            report.rank,
            figs,
            **opts,
            skipped=plots.skipped,
            origin=origin,
            base=base,
            sections=report.sections,
        )
    raise ConfigError(f"cannot render format {fmt!r} as text")


def rich_renderables(report: Report) -> list:
    """Terminal tables (rich) for the report."""
    return to_rich(report.tables, report.rank, report.rank_lengths, report.digits, report.ratio)
