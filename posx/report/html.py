"""A single self-contained HTML page: tables, ranking and every plot embedded as SVG data."""

from __future__ import annotations

import base64
from html import escape

import pandas as pd

from posx.report.export import LEGEND, _rank_cells, rank_title
from posx.report.tables import WideTable, cell_parts, title

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.05em; margin-top: 2em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { padding: .25em .7em; border-bottom: 1px solid #ddd; text-align: right; }
th { border-bottom: 2px solid #444; } td:first-child, th:first-child { text-align: left; }
td.best { font-weight: bold; background: #e6f4e6; } td.none { color: #888; font-style: italic; }
.ratio { color: #0b6e99; font-size: .85em; } .few { color: #a66d00; font-size: .85em; }
.notes { color: #555; font-size: .85em; margin: 0 0 1em 0; padding-left: 1.2em; }
figure { display: inline-block; margin: .5em; } figure img { max-width: 520px; }
figcaption { font-size: .8em; color: #555; } .legend { color: #555; font-size: .9em; }
"""


def _cell(t: WideTable, row: str, length: int, digits: int, ratio: bool) -> str:
    value, extra, fewer, note = cell_parts(t, row, length, digits, ratio)
    cell = t.cell(row, length)
    cls = "best" if cell.best else ("none" if not cell.n else "")
    tip = f' title="{escape(t.notes[note - 1])}"' if note else ""
    body = escape(value)
    if note:
        body += f"<sup>{note}</sup>"
    if extra:
        body += f' <span class="ratio">{escape(extra)}</span>'
    if fewer:
        body += f' <span class="few">({escape(fewer)})</span>'
    return f'<td class="{cls}"{tip}>{body}</td>'


def _table(header: list[str], rows: list[str]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def to_html(
    tables: list[WideTable],
    rank: pd.DataFrame | None = None,
    figures: list[tuple[str, bytes]] | None = None,
    which: str = "ood",
    digits: int = 3,
    ratio: bool = True,
    heading: str = "posx report",
) -> str:
    """The whole report as one HTML document with no external references.

    Args:
        tables: Scenario tables (``pivot``).
        rank: The mean-reciprocal-rank table, or None to leave it out.
        figures: (caption, SVG bytes) pairs, embedded as data URIs.
    """
    body = [f"<h1>{escape(heading)}</h1>", f'<p class="legend">{escape(LEGEND)}.</p>']
    for t in tables:
        header = ["encoding", "n", *(f"L={x}" for x in t.lengths)]
        rows = []
        for row in t.rows:
            cells = "".join(_cell(t, row, x, digits, ratio) for x in t.lengths)
            rows.append(f"<tr><td>{escape(row)}</td><td>{t.n[row]}</td>{cells}</tr>")
        body.append(f"<h2>{escape(title(t.meta))}</h2>")
        body.append(_table(header, rows))
        if t.notes:
            notes = "".join(f"<li>[{i}] {escape(n)}</li>" for i, n in enumerate(t.notes, 1))
            body.append(f'<ul class="notes">{notes}</ul>')
        for remark in t.remarks:
            body.append(f'<p class="notes">Note: {escape(remark)}</p>')
    if rank is not None and len(rank):
        header, cells = _rank_cells(rank)
        rows = ["<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in cells]
        body += [f"<h2>{escape(rank_title(which))}</h2>", _table(header, rows)]
    if figures:
        body.append("<h2>Plots</h2>")
        for caption, svg in figures:
            data = base64.b64encode(svg).decode()
            body.append(
                f'<figure><img alt="{escape(caption)}" src="data:image/svg+xml;base64,{data}">'
                f"<figcaption>{escape(caption)}</figcaption></figure>"
            )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(heading)}</title><style>{STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
