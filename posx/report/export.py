"""Renders ``WideTable``s and the ranking: terminal (rich), Markdown, CSV (LaTeX:
:mod:`posx.report.latex`).

Every format shows the same cells: ``mean ± std`` over seeds, ``×r`` (the table's metric
relative to the same run at its training length), ``n=k`` where a cell has fewer seeds than its
row, the best cell per column in bold, and ``unsupported [k]``/``failed [k]`` with note ``k``
giving the reason. Each title names the metric and its unit; remarks under a table name the
settings its rows differ in beyond what the table groups by.
"""

from __future__ import annotations

import pandas as pd
from rich.text import Text

from posx.report.fit import Column, FittedTable
from posx.report.tables import (
    SEQUENCE_UNITS,
    Section,
    WideTable,
    cell_parts,
    learned_mark,
    length_header,
    length_unit,
    row_label,
    sequence_unit,
    title,
)

# The legend's parts; the lengths' part names only the units the tables have.
LEGEND_CELLS = "mean ± std over seeds in the unit of the table's title (n = distinct seeds)"
LEGEND_DIGITS = "a column named N digits: operands of up to N digits"
LEGEND_RATIO = (
    "×r = the cell's value over the same run's value at its training length (same metric, "
    "1.00 = unchanged); best per column in bold"
)
UNLEARNED_NOTE = (
    "not learned = below --learned at its own training length (exact match above chance, or "
    "the loss of --learned-loss): shown and ranked last, never bold"
)

SEEDS_UNLEARNED_NOTE = (
    "k of n seeds not learned = the row's mean learned, but k seeds are below --learned at the "
    "training length on their own: the mean includes them, posx check leaves them out"
)


def legend(tables: list[WideTable]) -> str:
    """The legend under the tables: how to read a cell, what the length columns count (only the
    units these tables have: no word on digit columns under tables in tokens), and ``not
    learned`` where a row is marked so."""
    units = {length_unit(t.meta) for t in tables}
    parts = [LEGEND_CELLS]
    counted = {sequence_unit(u) for u in units}
    sequence = [u for u in SEQUENCE_UNITS if u in counted] or ([] if units else ["tokens"])
    if sequence:  # L=64 counts tokens or bytes: each table's title says which
        which = " (as its table's title says)" if len(sequence) > 1 else ""
        parts.append(f"L = eval length in {' or '.join(sequence)}{which}")
    parts += [LEGEND_DIGITS] if "digits" in units else []
    other = sorted(u for u in units if not sequence_unit(u) and u != "digits")
    parts += [f"a column named N {u}: eval length in {u}" for u in other]
    parts.append(LEGEND_RATIO)
    if any(t.not_learned for t in tables):
        parts.append(UNLEARNED_NOTE)
    if any(t.seeds_not_learned for t in tables):
        parts.append(SEEDS_UNLEARNED_NOTE)
    return "; ".join(parts)


def rank_title(which: str) -> str:
    """The ranking's title, naming the eval lengths ranked on (``which``: ``ood`` or ``all``)."""
    lengths = "eval lengths past training" if which == "ood" else "all eval lengths"
    return (
        f"Ranking across tasks: mean reciprocal rank over the tasks ranked in (ranks on "
        f"{lengths}; ties share the average rank; runs not learned rank last; tasks where no "
        f"learned run is above chance carry no rank)"
    )


def _rank_value(x: object) -> str:
    """A rank (``2``, ``2.5``), the reason for none (``not learned``), or ``—`` (not run)."""
    if isinstance(x, str):
        return x
    if pd.isna(x):
        return "—"
    return f"{float(x):g}"


def _rank_cells(rank: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    header = ["encoding", "MRR", "tasks ranked", *rank.columns[3:]]
    rows = []
    for rec in rank.itertuples(index=False):
        mrr = "—" if pd.isna(rec.mrr) else f"{rec.mrr:.3f}"
        rows.append([str(rec.variant), mrr, str(rec.tasks), *map(_rank_value, rec[3:])])
    return header, rows


# --- terminal --------------------------------------------------------------------------------


def to_rich(
    tables: list[WideTable],
    rank: pd.DataFrame | None = None,
    which: str = "ood",
    digits: int = 3,
    ratio: bool = True,
) -> list[FittedTable | Text]:
    """Rich renderables: one table per scenario (notes as its caption), then the ranking; each
    fits the width it is printed at."""
    out: list[FittedTable | Text] = []
    for t in tables:
        # The title goes above as its own line: a table title would wrap to the table's width.
        out += [Text(title(t.meta), style="bold"), _rich_table(t, digits, ratio)]
    if rank is not None and len(rank):
        out += [Text(rank_title(which), style="bold"), _rich_rank(rank)]
    if tables:
        out.append(Text(legend(tables), style="dim"))
    return out


def _rich_table(t: WideTable, digits: int, ratio: bool) -> FittedTable:
    """One scenario's table, fitted to the terminal (numbers never cut: the lengths split into
    groups where they do not fit); its notes and remarks are the caption."""
    lines = [f"[{i}] {note}" for i, note in enumerate(t.notes, 1)]
    caption = "\n".join([*lines, *(f"note: {r}" for r in t.remarks)]) or None
    labels = []
    for row in t.rows:
        label = Text(row)
        mark = learned_mark(t, row)
        if mark:  # in parentheses after it: on a line alone it read as a row
            label.append(f" ({mark})", style="italic")
        labels.append(label)
    values = [
        Column(length_header(t.meta, length),
               [_rich_cell(t, row, length, digits, ratio) for row in t.rows])
        for length in t.lengths
    ]  # fmt: skip
    return FittedTable(
        label=Column("encoding", labels, justify="left"),
        fixed=[Column("n", [Text(str(t.n[row])) for row in t.rows])],
        values=values,
        caption=caption,
        row_styles=["dim" if row in t.not_learned else None for row in t.rows],
    )


def _rich_cell(t: WideTable, row: str, length: int, digits: int, ratio: bool) -> Text:
    """One cell: the value (bold green when best; dim, with its note's number, when a note
    explains it), then the ``×r`` ratio and the seed count when it has fewer seeds than its row."""
    value, extra, fewer, note = cell_parts(t, row, length, digits, ratio)
    best = t.cell(row, length).best
    text = Text(value, style="bold green" if best else ("dim" if note else ""))
    if note:
        text.append(f" [{note}]", style="dim")
    if extra:
        text.append(f" {extra}", style="cyan")
    if fewer:
        text.append(f" ({fewer})", style="yellow")
    return text


def _rich_rank(rank: pd.DataFrame) -> FittedTable:
    """The ranking table: the encoding column left-aligned and bold, the numbers right, the
    tasks' columns in groups where they do not fit."""
    header, rows = _rank_cells(rank)
    columns = [Column(name, [Text(cells[i]) for cells in rows]) for i, name in enumerate(header)]
    columns[0].justify = "left"
    return FittedTable(label=columns[0], fixed=columns[1:3], values=columns[3:])


# --- Markdown ----------------------------------------------------------------------------------


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def md_cell(t: WideTable, row: str, length: int, digits: int, ratio: bool) -> str:
    """One cell in Markdown: the value (bold when best), its note's number, the ``×r`` ratio
    and the seed count when it has fewer seeds than its row."""
    value, extra, fewer, note = cell_parts(t, row, length, digits, ratio)
    text = f"**{value}**" if t.cell(row, length).best else value
    if note:
        text += f" [{note}]"
    if extra:
        text += f" {extra}"
    if fewer:
        text += f" ({fewer})"
    return text


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
    ]
    lines += ["| " + " | ".join(_md_escape(c) for c in cells) + " |" for cells in rows]
    return lines


def to_markdown(
    tables: list[WideTable],
    rank: pd.DataFrame | None = None,
    which: str = "ood",
    digits: int = 3,
    ratio: bool = True,
) -> str:
    """GitHub-flavoured Markdown: a bold title, the table, then its notes, per scenario."""
    parts = []
    for t in tables:
        header = ["encoding", "n", *(length_header(t.meta, x) for x in t.lengths)]
        rows = [
            [
                row_label(t, row),
                str(t.n[row]),
                *(md_cell(t, row, x, digits, ratio) for x in t.lengths),
            ]
            for row in t.rows
        ]
        lines = [f"**{title(t.meta)}**", "", *_md_table(header, rows)]
        if t.notes:
            lines += ["", *(f"- [{i}] {_md_escape(n)}" for i, n in enumerate(t.notes, 1))]
        if t.remarks:
            lines += ["", *(f"- note: {_md_escape(r)}" for r in t.remarks)]
        parts.append("\n".join(lines))
    if rank is not None and len(rank):
        header, rows = _rank_cells(rank)
        parts.append("\n".join([f"**{rank_title(which)}**", "", *_md_table(header, rows)]))
    if tables:
        parts.append(f"_{legend(tables)}._")
    return "\n\n".join(parts) + "\n"


def section_markdown(section: Section) -> str:
    """A :class:`Section` as a bold title, a Markdown table and its notes."""
    lines = [f"**{_md_escape(section.title)}**", "", *_md_table(section.header, section.rows)]
    if section.notes:
        lines += ["", *(f"- {_md_escape(n)}" for n in section.notes)]
    return "\n".join(lines) + "\n"


# --- CSV ---------------------------------------------------------------------------------------


def to_csv(frame: pd.DataFrame) -> str:
    """The long summary (or the ranking) as CSV, one row per cell."""
    return frame.to_csv(index=False)
