"""``posx.report(root, ...)``: the report as a DataFrame for a notebook, with plots and the HTML
page on request; the package itself is callable so that the name serves both the function and
``import posx.report.build``."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from posx.report.build import make_report
from posx.report.output import check_destinations, export_text, write_report_plots
from posx.storage.atomic import atomic_write


def report(
    root: str | Path = "results",
    *,
    metric: str = "auto",
    plot_dir: str | Path | None = None,
    html: str | Path | None = None,
    **options: Any,
) -> pd.DataFrame:
    """``posx report``'s summary of every result below ``root``, as a DataFrame; plots and the
    HTML page on request.

    Args:
        root: Results root; every run directory below it counts.
        metric: ``auto`` (bpb for text, exact match for synthetic tasks), or an ``eval.csv``
            column (``loss``, ``exact_match``, ...).
        plot_dir: Write the plots here (PNG and SVG), as ``posx report --plot DIR``.
        html: Write the report as one HTML page (plots embedded) to this file.
        options: Any other option of :func:`posx.report.build.make_report`: ``tasks``,
            ``encodings``, ``modes``, ``variants``, ``by``, ``where``, ``rank``,
            ``rank_lengths``, ``digits``, ``ratio``, ``learned``, ``learned_loss``.

    Returns:
        One row per run group and eval length (``mean``, ``std``, ``n``, ``ratio_mean``,
        ...): the cells of ``posx report``'s tables, as ``posx report --format csv`` writes
        them.

    Raises:
        ConfigError: A bad option, or a destination that cannot be written (before any
            result is read).
    """
    plots, page = (Path(p) if p is not None else None for p in (plot_dir, html))
    check_destinations(page, plots)
    made = make_report(Path(root), metric=metric, **options)
    for warning in made.warnings:  # what the CLI prints on stderr
        warnings.warn(f"posx report: {warning}", stacklevel=2)
    if plots is not None:
        _, skipped = write_report_plots(made, plots)
        for stem, why in skipped:
            warnings.warn(f"posx report: no plot {stem}: {why}", stacklevel=2)
    if page is not None:
        atomic_write(page, export_text(made, "html", page) or "")
    return made.summary
