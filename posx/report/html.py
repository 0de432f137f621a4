"""A single self-contained HTML page: a provenance header, then each table with its own plots
(SVG embedded as data), the ranking, and every configuration with links to its runs' configs.

The page reads at laptop width: plots scale to the column (two side by side when there is
room), wide tables scroll inside their own box instead of widening the page.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

import pandas as pd

from posx.report.configs import distinguishing, read_run_config
from posx.report.export import _rank_cells, legend, rank_title
from posx.report.plots.figures import slug
from posx.report.provenance import Provenance, link
from posx.report.tables import Section, WideTable, cell_parts, length_header, row_label, title

STYLE = """
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, sans-serif; margin: 0 auto; padding: 1em 1.5em 3em;
       max-width: 1280px; color: #222; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.1em; margin-top: 2.2em; }
header.provenance { color: #444; font-size: .9em; border-bottom: 1px solid #ccc;
                    padding-bottom: .6em; display: flex; flex-wrap: wrap; gap: .2em 1.4em; }
header.provenance span { white-space: nowrap; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { padding: .25em .7em; border-bottom: 1px solid #ddd; text-align: right;
         white-space: nowrap; }
th { border-bottom: 2px solid #444; } td:first-child, th:first-child { text-align: left; }
td.best { font-weight: bold; background: #e6f4e6; } td.none { color: #888; font-style: italic; }
tr.unlearned td { color: #999; } tr.unlearned td:first-child { font-style: italic; }
.ratio { color: #0b6e99; font-size: .85em; } .few { color: #a66d00; font-size: .85em; }
.notes { color: #555; font-size: .85em; margin: 0 0 1em 0; padding-left: 1.2em; }
.plots { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(440px, 100%), 1fr));
         gap: 1em; align-items: start; }
figure { margin: 0; min-width: 0; }
figure img { width: 100%; height: auto; display: block; }
figcaption { font-size: .8em; color: #555; } .legend { color: #555; font-size: .9em; }
.skipped { color: #8a5a00; font-size: .85em; }
table.configs td, table.configs th { white-space: normal; text-align: left; vertical-align: top; }
code { font-size: .9em; }
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


def _table(header: list[str], rows: list[str], cls: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    attr = f' class="{cls}"' if cls else ""
    table = f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    return f'<div class="scroll">{table}</div>'


def _figure(stem: str, svg: bytes) -> str:
    data = base64.b64encode(svg).decode()
    return (
        f'<figure><img alt="{escape(stem)}" src="data:image/svg+xml;base64,{data}">'
        f"<figcaption>{escape(stem)}</figcaption></figure>"
    )


def _stems_of(t: WideTable) -> list[str]:
    """The file stems of the plots that belong under table ``t`` (see ``plots.slug``)."""
    train = {k: t.meta[k] for k in ("task", "model", "train_length") if k in t.meta}
    return [
        slug("length", t.meta, t.metric),
        slug("heatmap", t.meta, t.metric),
        slug("positions", t.meta),
        *([slug("training", train)] if len(train) == 3 else []),
    ]


def _mine(stem: str, wanted: list[str]) -> bool:
    # plots.figures numbers repeated stems stem-2, stem-3, ...
    return any(stem == w or (stem.startswith(f"{w}-") and stem[len(w) + 1 :].isdigit())
               for w in wanted)  # fmt: skip


def _header(p: Provenance) -> str:
    commit = f"git {escape(p.commit)}" if p.commit else "not in a git tree"
    runs = sum(len(c.runs) for c in p.configs)
    parts = [
        f"posx {escape(p.version)}",
        f"generated {escape(p.generated)}",
        f"posx source: {commit}",
        f"results: <code>{escape(str(p.root))}</code>",
        f'{runs} run(s), {len(p.configs)} distinct config(s) (<a href="#configs">list</a>)',
    ]
    return '<header class="provenance">' + "".join(f"<span>{x}</span>" for x in parts) + "</header>"


def _differs(p: Provenance) -> dict[str, str]:
    """Per fingerprint, the settings that tell it from configs sharing a row name."""
    identities = {
        c.fingerprint: read_run_config(c.runs[0][2].parent.parent).identity
        for c in p.configs
        if c.fingerprint and c.runs
    }
    return distinguishing(identities, {c.fingerprint: c.labels for c in p.configs})


def _configs(p: Provenance, base: Path | None) -> list[str]:
    differs = _differs(p)
    rows = []
    for c in p.configs:
        seeds = [seed for _, seed, _ in c.runs]
        unique = len(set(seeds)) == len(seeds)  # else name the runs: same seed, other task/...
        runs = ", ".join(
            f'<a href="{escape(link(path, base))}" title="{escape(run)}">'
            f"{f'seed {seed}' if unique else escape(run)}</a>"
            for run, seed, path in c.runs
        )
        name = f"<code>{escape(c.fingerprint)}</code>" if c.fingerprint else "no saved config"
        cells = [escape(", ".join(c.labels)), escape(differs.get(c.fingerprint, "")), runs]
        rows.append(f"<tr><td>{name}</td>" + "".join(f"<td>{x}</td>" for x in cells) + "</tr>")
    return [
        '<h2 id="configs">Configurations (one per config fingerprint; links open each run\'s '
        "<code>.hydra/config.yaml</code>)</h2>",
        _table(["config", "rows", "differs in", "runs"], rows, cls="configs"),
        '<p class="notes">differs in: the settings that tell a configuration from the other '
        "configurations with a row of the same name (<code>rope</code> in two tables, say)</p>",
    ]


def to_html(
    tables: list[WideTable],
    rank: pd.DataFrame | None = None,
    figures: list[tuple[str, bytes]] | None = None,
    which: str = "ood",
    digits: int = 3,
    ratio: bool = True,
    heading: str = "posx report",
    skipped: list[tuple[str, str]] | None = None,
    origin: Provenance | None = None,
    base: Path | None = None,
    sections: list[Section] | None = None,
) -> str:
    """The whole report as one HTML document with no external references.

    Args:
        tables: Scenario tables (``pivot``).
        rank: The mean-reciprocal-rank table, or None to leave it out.
        figures: (file stem, SVG bytes) pairs; each is shown under the table it belongs to.
        which: The lengths the ranking is on, for its title: ``ood`` or ``all``.
        digits: Decimals in the tables.
        ratio: Show each cell's ``×r`` ratio to the same run at its training length.
        heading: The page's title and top heading.
        skipped: (file stem, reason) of plots left out; the reason is shown in their place.
        origin: The provenance header and configuration list, or None to leave them out.
        base: The directory the page is written to (links to configs are relative to it).
        sections: Plain tables shown after the ranking (the claims' verdicts).
    """
    plots = _Placement(list(figures or []), list(skipped or []))
    body = [f"<h1>{escape(heading)}</h1>"]
    if origin is not None:
        body.append(_header(origin))
    body.append(f'<p class="legend">{escape(legend(tables))}.</p>')
    for i, t in enumerate(tables, 1):
        body += _result(i, t, digits, ratio, plots.under(t))
    body += plots.rest()
    body += _ranking(rank, which)
    for section in sections or []:
        body += _section(section)
    if origin is not None:
        body += _configs(origin, base)
    return _page(heading, body)


@dataclass
class _Placement:
    """Places each plot once: under the first table it belongs to, else under "Other plots"."""

    figures: list[tuple[str, bytes]]
    skipped: list[tuple[str, str]]  # (file stem, reason): the reason stands in for the plot
    shown: set[str] = field(default_factory=set)

    def under(self, t: WideTable) -> list[str]:
        """The plots of table ``t`` not shown yet, then the reasons for its plots left out."""
        stems = _stems_of(t)
        mine = [(s, svg) for s, svg in self.figures if _mine(s, stems) and s not in self.shown]
        lines = []
        if mine:
            lines.append('<div class="plots">' + "".join(_figure(s, svg) for s, svg in mine))
            lines.append("</div>")
        self.shown |= {s for s, _ in mine}
        for stem, why in self.skipped:
            if _mine(stem, stems) and stem not in self.shown:
                lines.append(_no_plot(stem, why))
                self.shown.add(stem)
        return lines

    def rest(self) -> list[str]:
        """An "Other plots" section with every plot no table has shown; none if there is none."""
        rest = [(s, svg) for s, svg in self.figures if s not in self.shown]
        if not rest and all(s in self.shown for s, _ in self.skipped):
            return []
        return [
            '<section class="result" id="other-plots"><h2>Other plots</h2>',
            '<div class="plots">' + "".join(_figure(s, svg) for s, svg in rest) + "</div>",
            *(_no_plot(stem, why) for stem, why in self.skipped if stem not in self.shown),
            "</section>",
        ]


def _no_plot(stem: str, why: str) -> str:
    """The line that stands in for a plot left out, with the reason."""
    return f'<p class="skipped">No plot {escape(stem)}: {escape(why)}</p>'


def _result(i: int, t: WideTable, digits: int, ratio: bool, plots: list[str]) -> list[str]:
    """Scenario table ``i`` as a section: its title, the table, its notes, then its plots."""
    header = ["encoding", "n", *(length_header(t.meta, x) for x in t.lengths)]
    rows = []
    for row in t.rows:
        cells = "".join(_cell(t, row, x, digits, ratio) for x in t.lengths)
        cls = ' class="unlearned"' if row in t.not_learned else ""
        label = escape(row_label(t, row))
        rows.append(f"<tr{cls}><td>{label}</td><td>{t.n[row]}</td>{cells}</tr>")
    lines = [
        f'<section class="result" id="table-{i}">',
        f"<h2>{escape(title(t.meta))}</h2>",
        _table(header, rows),
    ]
    if t.notes:
        notes = "".join(f"<li>[{k}] {escape(n)}</li>" for k, n in enumerate(t.notes, 1))
        lines.append(f'<ul class="notes">{notes}</ul>')
    lines += [f'<p class="notes">Note: {escape(remark)}</p>' for remark in t.remarks]
    return [*lines, *plots, "</section>"]


def _text_row(cells: list[str]) -> str:
    """A table row of plain text cells (escaped)."""
    return "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>"


def _ranking(rank: pd.DataFrame | None, which: str) -> list[str]:
    """The ranking's heading and table; none without a ranking."""
    if rank is None or not len(rank):
        return []
    header, cells = _rank_cells(rank)
    return [f"<h2>{escape(rank_title(which))}</h2>", _table(header, list(map(_text_row, cells)))]


def _section(section: Section) -> list[str]:
    """A plain section (the claims' verdicts): heading, table (cells wrap), notes."""
    rows = list(map(_text_row, section.rows))
    return [
        f"<h2>{escape(section.title)}</h2>",
        _table(section.header, rows, cls="configs"),
        *(f'<p class="notes">{escape(n)}</p>' for n in section.notes),
    ]


def _page(heading: str, body: list[str]) -> str:
    """The HTML document around ``body``, one element per line."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(heading)}</title><style>{STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
