"""Verdicts as a table: on the terminal (rich), in Markdown, and as a report section (HTML)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from posx.claims.verdict import FAILS, HOLDS, LEVEL, MIN_SEEDS, Verdict
from posx.report.export import section_markdown
from posx.report.tables import Section

HEADER = ["", "claim", "statement", "measured (mean ± std)", "n", "seed agreement", "paper",
          "why"]  # fmt: skip
COLOURS = {HOLDS: "green", FAILS: "red"}


def _number(value: float, digits: int) -> str:
    return "—" if math.isnan(value) else f"{value:.{digits}f}"


def measured_text(verdict: Verdict, digits: int = 3) -> str:
    """``sinusoidal 2.310 ± 0.020; rope 1.950 ± 0.010`` (the claim's terms)."""
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
    if not verdict.metric or verdict.metric == st.metric or (st.mrr and st.metric):
        return st.text
    return f"{st.text} (by {verdict.metric})"


def rows(verdicts: Sequence[Verdict], digits: int = 3) -> list[list[str]]:
    """One row of plain text per verdict, in :data:`HEADER`'s order."""
    out = []
    for v in verdicts:
        out.append([
            f"{v.symbol} {v.verdict}", f"{v.experiment}/{v.claim.id}", statement_text(v),
            measured_text(v, digits) + (f" {v.where}" if v.where else ""),
            str(v.seeds), v.statistic(), paper_text(v), v.reason,
        ])  # fmt: skip
    return out


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
        "split seeds, a term the report marks not learned, or every term at chance "
        "(docs/reproductions.md)"
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


def to_rich(section: Section) -> Table:
    """The verdicts as a terminal table, each verdict coloured."""
    table = Table(title=section.title, title_justify="left", caption_justify="left",
                  caption="\n".join(section.notes), show_lines=True)  # fmt: skip
    for col in section.header:
        table.add_column(col, overflow="fold")
    for row in section.rows:
        kind = row[0].split()[-1]
        table.add_row(Text(row[0], style=COLOURS.get(kind, "yellow")), *map(Text, row[1:]))
    return table
