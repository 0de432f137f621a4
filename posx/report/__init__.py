"""``posx report``: results below a root -> tables, ranking, exports and plots.

Modules: ``build`` (the :class:`Report`: load, filter, summarise, rank), ``output`` (output format,
destinations, the text of each format, terminal tables, plot files), ``data`` (loading, filters,
metric choice), ``protocols`` (one evaluation of a run, its ``×r``), ``configs`` (config
fingerprints, duplicates, ``--where``), ``labels`` (row labels, ``--by``, notes on differing
settings), ``units``, ``tables`` (summary and wide tables), ``rank`` (mean reciprocal rank across
tasks), ``export`` (rich, Markdown, LaTeX, CSV), ``html`` (one self-contained page) and ``plots``
(matplotlib figures).
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pandas as pd

from posx.report.build import Report, make_report
from posx.report.data import metric_by_task
from posx.report.export import to_csv, to_latex, to_markdown, to_rich
from posx.report.output import (
    FORMATS,
    SUFFIXES,
    check_destinations,
    export_text,
    output_format,
    render,
    report_figures,
    report_plots,
    rich_renderables,
    shows_tables,
    write_report_plots,
)
from posx.report.table import report
from posx.report.tables import Section, pivot, summarize

__all__ = [
    "FORMATS",
    "SUFFIXES",
    "Report",
    "Section",
    "check_destinations",
    "export_text",
    "make_report",
    "metric_by_task",
    "output_format",
    "pivot",
    "render",
    "report",
    "report_figures",
    "report_plots",
    "rich_renderables",
    "shows_tables",
    "summarize",
    "to_csv",
    "to_latex",
    "to_markdown",
    "to_rich",
    "write_report_plots",
]


class _CallablePackage(types.ModuleType):
    """This package, callable as :func:`posx.report.table.report`: ``posx.report`` names the
    notebook function (:mod:`posx.api`) and this package, and importing the package binds the
    name to it."""

    def __call__(self, *args: Any, **kwargs: Any) -> pd.DataFrame:
        return report(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
