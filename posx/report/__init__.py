"""``posx report``: results below a root -> tables, ranking, exports and plots.

Modules: ``build`` (the :class:`Report`: load, filter, summarise, rank), ``output`` (output format,
destinations, the text of each format, terminal tables, plot files), ``data`` (loading, filters,
metric choice), ``protocols`` (one evaluation of a run, its ``×r``), ``configs`` (config
fingerprints, duplicates, ``--where``), ``labels`` (row labels, ``--by``, notes on differing
settings), ``units``, ``tables`` (summary and wide tables), ``rank`` (mean reciprocal rank across
tasks), ``export`` (rich, Markdown, LaTeX, CSV), ``fit`` (terminal tables fitted to the width,
numbers never cut), ``html`` (one self-contained page) and ``plots``
(matplotlib figures).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from posx.report.build import Report, make_report
    from posx.report.data import metric_by_task
    from posx.report.export import to_csv, to_markdown, to_rich
    from posx.report.latex import to_latex
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

# Where each name lives: imported on first use, so that a module of this package that needs no
# pandas (``units``: what ``posx train`` prints) is read without it.
_HOMES = {
    **dict.fromkeys(("Report", "make_report"), "build"),
    "metric_by_task": "data",
    **dict.fromkeys(("to_csv", "to_markdown", "to_rich"), "export"),
    "to_latex": "latex",
    **dict.fromkeys(
        (
            "FORMATS",
            "SUFFIXES",
            "check_destinations",
            "export_text",
            "output_format",
            "render",
            "report_figures",
            "report_plots",
            "rich_renderables",
            "shows_tables",
            "write_report_plots",
        ),
        "output",
    ),
    "report": "table",
    **dict.fromkeys(("Section", "pivot", "summarize"), "tables"),
}

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
        from posx.report.table import report

        return report(*args, **kwargs)


def __getattr__(name: str) -> Any:
    """``posx.report.NAME`` from its module, imported on first use."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"posx.report.{_HOMES[name]}"), name)


sys.modules[__name__].__class__ = _CallablePackage
