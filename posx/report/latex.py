"""``WideTable``s and the ranking as LaTeX: one booktabs ``table`` per scenario, the same cells
as every other format (:mod:`posx.report.export`)."""

from __future__ import annotations

import pandas as pd

from posx.report.export import _rank_cells, legend, rank_title
from posx.report.tables import WideTable, cell_parts, row_label, tex_length, title

_TEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "·": r"$\cdot$",
    "×": r"$\times$",
    "±": r"$\pm$",
    "—": "---",
}


def tex_escape(text: str) -> str:
    """Text safe inside a LaTeX document (special characters and posx's symbols)."""
    return "".join(_TEX.get(ch, ch) for ch in str(text))


def tex_cell(t: WideTable, row: str, length: int, digits: int, ratio: bool) -> str:
    """One cell in LaTeX (escaped): the value (bold when best), its note's number as a
    superscript, then the ``×r`` ratio and the seed count in small type."""
    value, extra, fewer, note = cell_parts(t, row, length, digits, ratio)
    text = tex_escape(value)
    if t.cell(row, length).best:
        text = rf"\textbf{{{text}}}"
    if note:
        text += rf"\textsuperscript{{{note}}}"
    if extra:
        text += rf" {{\scriptsize {tex_escape(extra)}}}"
    if fewer:
        text += rf" {{\scriptsize ({tex_escape(fewer)})}}"
    return text


def _tex_tabular(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        r"\begin{tabular}{l" + "r" * (len(header) - 1) + "}",
        r"\toprule",
        " & ".join(header) + r" \\",
        r"\midrule",
        *(" & ".join(cells) + r" \\" for cells in rows),
        r"\bottomrule",
        r"\end{tabular}",
    ]


def to_latex(
    tables: list[WideTable],
    rank: pd.DataFrame | None = None,
    which: str = "ood",
    digits: int = 3,
    ratio: bool = True,
) -> str:
    """One booktabs ``table`` per scenario (caption = title + legend), notes under the tabular."""
    parts = [r"% posx report; needs \usepackage{booktabs}"]
    for t in tables:
        header = ["encoding", "$n$", *(tex_length(t.meta, x) for x in t.lengths)]
        rows = [
            [
                tex_escape(row_label(t, row)),
                str(t.n[row]),
                *(tex_cell(t, row, x, digits, ratio) for x in t.lengths),
            ]
            for row in t.rows
        ]
        lines = [
            r"\begin{table}[t]",
            r"\centering",
            rf"\caption{{{tex_escape(title(t.meta))}. {tex_escape(legend([t]))}.}}",
            *_tex_tabular(header, rows),
        ]
        if t.notes:
            notes = r"\\ ".join(
                rf"\textsuperscript{{{i}}}{tex_escape(n)}" for i, n in enumerate(t.notes, 1)
            )
            lines += [r"\par\smallskip{\footnotesize " + notes + "}"]
        for remark in t.remarks:
            lines += [r"\par\smallskip{\footnotesize Note: " + tex_escape(remark) + "}"]
        lines.append(r"\end{table}")
        parts.append("\n".join(lines))
    if rank is not None and len(rank):
        header, rows = _rank_cells(rank)
        parts.append(
            "\n".join(
                [
                    r"\begin{table}[t]",
                    r"\centering",
                    rf"\caption{{{tex_escape(rank_title(which))}.}}",
                    *_tex_tabular(
                        [tex_escape(h) for h in header],
                        [[tex_escape(c) for c in cells] for cells in rows],
                    ),
                    r"\end{table}",
                ]
            )
        )
    return "\n\n".join(parts) + "\n"
