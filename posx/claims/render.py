"""Verdicts as a table: on the terminal (rich), in Markdown, as a report section (HTML), and as
JSON records for scripts.

On a terminal too narrow for the table's eight columns (an 80-column one) each claim is a block
of labelled lines instead, so that no claim id is split across lines (:class:`ClaimsView`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from posx.claims.verdict import FAILS, HOLDS, INCONCLUSIVE, LEVEL, MIN_SEEDS, Verdict
from posx.report.export import section_markdown
from posx.report.tables import Section

HEADER = ["", "claim", "statement", "measured (mean ± std)", "n", "seed agreement", "paper",
          "why"]  # fmt: skip
COLOURS = {HOLDS: "green", FAILS: "red"}
# Columns that never wrap on the terminal: the verdict, the claim id (an id split over lines
# reads as another id) and the seed count. The others wrap, each given at least WRAP_MIN
# columns (or its longest word) before the table is preferred to one block per claim.
NO_WRAP = (0, 1, 4)
WRAP_MIN = 16
# The labels of a claim's lines in the narrow layout, by table column (the verdict and the id
# share the block's first line).
BLOCK_LABELS = {2: "statement", 3: "measured", 4: "seeds", 5: "seed agreement", 6: "paper",
                7: "why"}  # fmt: skip


def _number(value: float, digits: int) -> str:
    return "—" if math.isnan(value) else f"{value:.{digits}f}"


def measured_text(verdict: Verdict, digits: int = 3) -> str:
    """``sinusoidal 2.310 ± 0.020; rope 1.950 ± 0.010`` (the claim's terms; effective lengths
    in whole tokens)."""
    digits = 0 if verdict.claim.statement.effective else digits
    parts = []
    for m in verdict.measured:
        spread = "" if math.isnan(m.std) else f" ± {_number(m.std, digits)}"
        parts.append(f"{m.term} {_number(m.mean, digits)}{spread}")
    return "; ".join(parts) or "—"


def paper_text(verdict: Verdict) -> str:
    """What the paper published for the claim, with where (``Table 2``) and in which unit."""
    claim = verdict.claim
    values = []
    for name, v in claim.published.items():
        shown = "/".join(f"{x:g}" for x in v) if isinstance(v, list) else f"{v:g}"
        values.append(f"{name} {shown}")
    where = ", ".join(x for x in (claim.table, claim.published_metric) if x)
    text = "; ".join(values)
    return f"{text} ({where})" if text and where else (text or where or "—")


def statement_text(verdict: Verdict) -> str:
    """The statement, with the metric its values are in when the statement does not say it:
    ``nope >= rope at 2x (by exact_match)``, or ``by exact_match`` on parity shown as ``(by
    exact_match_above_chance)``, the unit the report's table (and so the claim) reads."""
    st = verdict.claim.statement
    if not verdict.metric or verdict.metric == st.metric or (st.mrr and st.metric) or st.effective:
        return st.text
    return f"{st.text} (by {verdict.metric})"


def rows(verdicts: Sequence[Verdict], digits: int = 3) -> list[list[str]]:
    """One row of plain text per verdict, in :data:`HEADER`'s order."""
    out = []
    for v in verdicts:
        out.append([
            f"{v.symbol} {v.verdict}", f"{v.experiment}/{v.claim.id}", statement_text(v),
            measured_text(v, digits) + (f" {v.where}" if v.where else ""),
            str(v.seeds), v.statistic(), paper_text(v), why_text(v),
        ])  # fmt: skip
    return out


def why_text(verdict: Verdict) -> str:
    """The reason for a ?/✗ and what the verdict rests on beyond its terms' rows (seeds left
    out, runs without a partner), one clause each."""
    return "; ".join(x for x in (verdict.reason, *verdict.notes) if x)


def summary(verdicts: Sequence[Verdict]) -> str:
    """``3 of 5 claims hold, 1 fails, 1 inconclusive``."""
    count = {k: sum(v.verdict == k for v in verdicts) for k in (HOLDS, FAILS)}
    unsure = len(verdicts) - count[HOLDS] - count[FAILS]
    return (
        f"{count[HOLDS]} of {len(verdicts)} claims hold, {count[FAILS]} fail, {unsure} inconclusive"
    )


def rule(min_seeds: int = MIN_SEEDS, level: float = LEVEL) -> str:
    """The verdict rule in one sentence (printed under every claims table)."""
    return (
        f"✓ holds: every comparison holds on the seed means and in ≥ {level:.0%} of the "
        f"seed-level comparisons; ✗ fails: one fails on the means and its opposite holds in "
        f"≥ {level:.0%} of them; ? inconclusive: a missing value, fewer than {min_seeds} seeds, "
        "split seeds, a term not learned at its training length, or two terms both at chance; "
        "a seed not learned is left out, related runs pair one to one, a ✓ or ✗ within its "
        "seeds' spread of the bound is marked near the bound (docs/reproductions.md)"
    )


def claims_section(
    verdicts: Sequence[Verdict], notes: Sequence[str] = (), min_seeds: int = MIN_SEEDS,
    level: float = LEVEL,
) -> Section:  # fmt: skip
    """The verdicts as a report :class:`Section` (HTML and Markdown reports)."""
    return Section(
        f"Claims: {summary(verdicts)}", HEADER, rows(verdicts),
        [rule(min_seeds, level), *notes],
    )  # fmt: skip


def to_markdown(section: Section) -> str:
    """The verdicts section as Markdown: a bold title, the table, then its notes."""
    return section_markdown(section)


def to_rich(section: Section) -> ClaimsView:
    """The verdicts for the terminal, each verdict coloured: the table where it fits the
    console's width, one block per claim where it does not (see :class:`ClaimsView`)."""
    return ClaimsView(section)


class ClaimsView:
    """A rich renderable that picks its layout when printed, from the width it is given.

    The table needs its unwrapped columns (verdict, claim id, n) whole plus :data:`WRAP_MIN`
    columns (or the longest word there) for each other one; narrower, each claim is a block:
    ``? inconclusive  preset/claim`` and then one labelled, wrapped line per column.
    """

    def __init__(self, section: Section) -> None:
        self.section = section

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if options.max_width >= table_width(self.section):
            yield table(self.section)
        else:
            yield from blocks(self.section)


def table_width(section: Section) -> int:
    """The fewest terminal columns the verdicts' table takes with every claim id on one line
    and no word of a wrapping column split.

    Rich narrows the widest wrapping columns first, down to a common width; giving each the
    widest of their longest words keeps every word whole whatever their contents.
    """
    columns = list(zip(section.header, *section.rows, strict=True))
    fixed = sum(max(map(len, columns[i])) for i in NO_WRAP)
    words = [len(w) for i, col in enumerate(columns) if i not in NO_WRAP for w in _words(col)]
    wrapping = len(columns) - len(NO_WRAP)
    # a box table spends 3 columns per column (a rule and a space each side), plus the last rule
    return fixed + wrapping * max(WRAP_MIN, *words) + 3 * len(columns) + 1


def _words(cells: Sequence[str]) -> Iterator[str]:
    for cell in cells:
        yield from cell.split()


def table(section: Section) -> Table:
    """The verdicts as a terminal table, each verdict coloured."""
    out = Table(title=section.title, title_justify="left", caption_justify="left",
                caption="\n".join(section.notes), show_lines=True)  # fmt: skip
    for i, col in enumerate(section.header):
        out.add_column(col, overflow="fold", no_wrap=i in NO_WRAP)
    for row in section.rows:
        out.add_row(_verdict(row[0]), *map(Text, row[1:]))
    return out


def _verdict(cell: str) -> Text:
    """``✓ holds`` in green, ``✗ fails`` in red, ``? inconclusive`` in yellow."""
    return Text(cell, style=COLOURS.get(cell.split()[-1], "yellow"))


def blocks(section: Section) -> Iterator[Text | Padding]:
    """The verdicts one block per claim: the title, then for each claim its verdict and id on
    one line and its other columns as labelled lines that wrap under their value, then the
    notes."""
    yield Text(section.title, style="bold")
    for row in section.rows:
        yield Text()
        yield Text.assemble(_verdict(row[0]), "  ", (row[1], "bold"))
        lines = Table.grid(padding=(0, 2))
        lines.add_column(style="dim", no_wrap=True)
        lines.add_column(overflow="fold")
        for i, label in BLOCK_LABELS.items():
            lines.add_row(label, Text(row[i]))
        yield Padding(lines, (0, 0, 0, 2))
    if section.notes:
        yield Text()
        yield from (Text(note, style="dim") for note in section.notes)


# --- JSON -------------------------------------------------------------------------------------


def _finite(value: float) -> float | None:
    """A value JSON can hold: NaN (nothing measured) is null."""
    return None if math.isnan(value) else float(value)


def claim_record(verdict: Verdict) -> dict[str, Any]:
    """One verdict as a JSON object: the claim, its verdict and why, what was measured per term
    (mean, std and the value of each seed) and the seed-level agreement behind it."""
    claim = verdict.claim
    statistic = verdict.statistic()
    return {
        "id": f"{verdict.experiment}/{claim.id}",
        "experiment": verdict.experiment,
        "claim": claim.id,
        "verdict": verdict.verdict,
        "statement": claim.statement.text,
        "metric": verdict.metric or None,
        "where": verdict.where,
        "measured": [
            {
                "term": m.term,
                "mean": _finite(m.mean),
                "std": _finite(m.std),
                "values": {str(seed): _finite(x) for seed, x in m.seeds.items()},
                "left_out": {str(seed): why for seed, why in m.left_out.items()},
            }
            for m in verdict.measured
        ],  # fmt: skip
        "seeds": int(verdict.seeds),
        "seed_agreement": None if statistic == "—" else statistic,
        "reason": verdict.reason,
        "notes": list(verdict.notes),
        "near_bound": verdict.near_bound,
        "paper": verdict.paper,
        "table": claim.table,
        "published": claim.published,
        "published_metric": claim.published_metric,
    }


def claims_records(verdicts: Sequence[Verdict]) -> list[dict[str, Any]]:
    """Every verdict as a JSON object (:func:`claim_record`), in the table's order."""
    return [claim_record(v) for v in verdicts]


def claims_json(
    verdicts: Sequence[Verdict], notes: Sequence[str] = (), min_seeds: int = MIN_SEEDS,
    level: float = LEVEL,
) -> str:  # fmt: skip
    """``posx check --format json``: the counts per verdict, one object per claim and the notes
    printed under the table (the verdict rule first)."""
    count = {k: sum(v.verdict == k for v in verdicts) for k in (HOLDS, FAILS, INCONCLUSIVE)}
    document = {
        "summary": {"claims": len(verdicts), **count},
        "claims": claims_records(verdicts),
        "notes": [rule(min_seeds, level), *notes],
    }
    return json.dumps(document, ensure_ascii=False, indent=2, allow_nan=False) + "\n"
