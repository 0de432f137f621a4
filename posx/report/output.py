"""Where a :class:`~posx.report.build.Report` goes and in which form: the output format, the
checks on its destinations, the text of each format (JSON's records are made here), the
terminal tables and the plot files."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.text import Text

from posx.errors import ConfigError
from posx.report.build import Report
from posx.report.export import section_markdown, to_csv, to_markdown, to_rich
from posx.report.fit import FittedTable
from posx.report.html import to_html
from posx.report.latex import to_latex
from posx.report.plots.figures import Figures, write_plots
from posx.report.plots.figures import render as render_figure
from posx.report.plots.selection import Plots, figures
from posx.report.provenance import provenance
from posx.storage.results import check_writable

FORMATS = {"rich": "rich", "md": "md", "markdown": "md", "csv": "csv", "latex": "latex",
           "tex": "latex", "html": "html", "json": "json"}  # fmt: skip
SUFFIXES = {".md": "md", ".markdown": "md", ".csv": "csv", ".tex": "latex", ".html": "html",
            ".htm": "html", ".json": "json"}  # fmt: skip


def output_format(fmt: str | None, output: Path | None) -> str:
    """The export format: ``--format``, else the output file's suffix, else rich."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise ConfigError(
                f"unknown --format {fmt!r}; choose from rich, md, csv, latex, html, json"
            )
        return FORMATS[fmt]
    if output is not None:
        return SUFFIXES.get(output.suffix.lower(), "md")
    return "rich"


def check_destinations(output: Path | None, plot: Path | None) -> None:
    """Checks that the report file (``-o``) and the plot directory (``--plot``) can be written,
    so that a bad destination fails before the results are read rather than after.

    Raises:
        ConfigError: ``output`` is a directory, or a destination is not writable.
    """
    if output is not None:
        if output.is_dir():
            raise ConfigError(f"-o {output} is a directory; give a file name such as report.md")
        check_writable(output.parent, "-o directory", "choose another place with -o")
    if plot is not None:
        check_writable(plot, "--plot directory", "choose another directory with --plot")


def shows_tables(kind: str, fmt: str | None, output: Path | None) -> bool:
    """Whether the terminal shows the report's rich tables: for the rich format, and also when
    ``-o`` alone picks the format (the file gets the export, the terminal the tables)."""
    return kind == "rich" or (output is not None and fmt is None)


def report_plots(report: Report) -> Plots:
    """Every plot of the report (file stem, matplotlib Figure) and the reasons for those left
    out, drawn once per report."""
    if report.figures is None:
        report.figures = figures(
            report.tables, report.positions, report.training, report.by, report.rows
        )
    return report.figures


def report_figures(report: Report) -> Figures:
    """Every plot of the report as (file stem, matplotlib Figure), drawn once per report."""
    return report_plots(report).figures


def write_report_plots(report: Report, directory: Path) -> tuple[list[Path], list[tuple[str, str]]]:
    """Writes every plot of the report into ``directory`` (PNG and SVG).

    Returns:
        The files written, and (file stem, reason) for each plot left out.
    """
    plots = report_plots(report)
    return write_plots(plots.figures, directory), plots.skipped


def export_text(
    report: Report,
    kind: str,
    output: Path | None,
    rank_csv: bool = False,
    extra: Mapping[str, Any] | None = None,
) -> str | None:
    """The text ``posx report`` writes to ``output`` (or stdout without one), or None when the
    terminal tables are all it shows.

    A rich report written to a file is Markdown: the same tables, readable outside a terminal.
    The links of an HTML page are relative to the directory it is written to (the current
    directory for stdout). ``extra``: keys added to a JSON document (see :func:`render`).
    """
    if kind == "rich":
        return None if output is None else render(report, "md")
    base = output.parent if output is not None else Path.cwd()
    return render(report, kind, rank_csv=rank_csv, base=base, extra=extra)


def render(
    report: Report,
    fmt: str,
    rank_csv: bool = False,
    base: Path | None = None,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """The report as text in ``md``, ``csv``, ``latex``, ``html`` (plots embedded) or ``json``.

    ``csv`` is the long summary, one row per cell, or with ``rank_csv`` the ranking table
    (one row per variant: mrr, tasks, rank per scenario). ``base`` is the directory an HTML
    page is written to: its links to each run's config are relative to it (absolute without).
    ``json`` is one document (:func:`to_json`); ``extra`` adds keys to it (the CLI's claims,
    whose verdicts this package cannot import), and stands in for the report's sections there.
    """
    if fmt == "json":
        return to_json(
            report.summary, report.rank, report.rank_lengths, report.warnings, **(extra or {})
        )
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
        return _html(report, base)
    raise ConfigError(f"cannot render format {fmt!r} as text")


def _html(report: Report, base: Path | None) -> str:
    """The report as one HTML page, its plots embedded as SVG."""
    plots = report_plots(report)
    figs = [(stem, render_figure(fig, "svg")) for stem, fig in plots.figures]
    origin = None
    if report.root is not None and report.rows is not None:
        origin = provenance(report.root, report.rows)
    return to_html(
        report.tables,
        report.rank,
        figs,
        which=report.rank_lengths,
        digits=report.digits,
        ratio=report.ratio,
        skipped=plots.skipped,
        origin=origin,
        base=base,
        sections=report.sections,
    )


def rich_renderables(report: Report) -> list[FittedTable | Text]:
    """Terminal tables (rich) for the report, each fitted to the width it is printed at."""
    return to_rich(report.tables, report.rank, report.rank_lengths, report.digits, report.ratio)


# --- JSON --------------------------------------------------------------------------------------

# The summary's column names in JSON where they differ from the CSV's: the ×r ratio's mean is
# what every table shows as the cell's ratio.
JSON_NAMES = {"ratio_mean": "ratio"}


def _plain(value: object) -> object:
    """A cell as JSON has it: NaN and NA (no value) are null, numpy scalars Python ones."""
    if pd.isna(value):  # a scalar: one cell
        return None
    return value.item() if isinstance(value, np.generic) else value


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of ``frame`` as JSON objects, column by column (NaN as null)."""
    return [{k: _plain(v) for k, v in row.items()} for row in frame.to_dict("records")]


def summary_records(summary: pd.DataFrame) -> list[dict[str, Any]]:
    """One object per cell of the tables (table key, row label and eval length): ``mean``,
    ``std``, ``n``, ``ratio`` (×r), ``ratio_std``, ``status``/``reason``, ``learned``,
    ``best``; the columns of the CSV export otherwise."""
    return records(summary.rename(columns=JSON_NAMES))


def rank_records(rank: pd.DataFrame) -> list[dict[str, Any]]:
    """One object per ranked row, best first: its ``label`` (as in the cells), ``mrr``,
    ``tasks`` (scenarios ranked in) and ``ranks`` (per scenario: a rank, the reason for none
    such as ``not learned``, or null where it was not run)."""
    out = []
    for row in records(rank):
        label, mrr, tasks = row.pop("variant"), row.pop("mrr"), row.pop("tasks")
        out.append({"label": label, "mrr": mrr, "tasks": tasks, "ranks": row})
    return out


def to_json(
    summary: pd.DataFrame,
    rank: pd.DataFrame | None = None,
    which: str = "ood",
    warnings: Sequence[str] = (),
    **extra: Any,
) -> str:
    """The report as one JSON document: ``cells`` (:func:`summary_records`), ``rank``
    (:func:`rank_records`, null without a ranking), ``rank_lengths`` and ``warnings``, then
    ``extra`` (e.g. the claims' verdicts)."""
    document = {
        "cells": summary_records(summary),
        "rank": None if rank is None else rank_records(rank),
        "rank_lengths": which,
        "warnings": list(warnings),
        **extra,
    }
    return json.dumps(document, ensure_ascii=False, indent=2, allow_nan=False) + "\n"
