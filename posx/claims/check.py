"""Checks a preset's claims against the runs under a results root.

The runs of a preset are those whose ``run.json`` records it (``experiment``, from the config's
``experiment_name``; else the saved config's ``experiment_name``); the claims come from posx's
own ``configs/claims/NAME.yaml`` (or a user config dir's), never from a run directory.

**The values.** A term's value is the cell ``posx report`` prints for its row at the claim's
length, read from the report's own summary (``report.tables.summarize``), never recomputed: the
metric in the table's unit (exact match above chance where the task has a chance level), or its
``×r`` (that value over the same run's at its training length). Its seed values are the cells of
``posx report --by seed``; for ``mrr:`` a seed's value is the MRR of the ranking built from that
seed's runs alone; for ``effective_length:`` it is the seed's RULER effective length
(:mod:`posx.claims.effective`).

**The rule.** A claim ``A op B [op C ...]`` is a chain of links ``A op B``. Per link:

- *on the mean*: the link holds for the seed means (for ``mrr:``, the MRR of the report's
  ranking of the seed-mean tables);
- *seed agreement*: the fraction of seed-level comparisons for which it holds: every pair of a
  seed of A with a seed of B (runs of different encodings are independent), a seed against a
  number, and for ``mrr:`` the seeds themselves (each seed is one whole ranking). Runs related
  by lineage are not independent: the rows of one run, siblings of one parent and a child and
  its parent pair one to one, over the runs both sides have, and "on the mean" is then over
  the paired runs (:mod:`posx.claims.lineage`).

A term's seeds are those that learned the task, each judged on its own value at the training
length: a seed below the report's ``--learned`` there is left out (the verdict says so), and
the term's mean is over the seeds kept.

The verdict: **✓ holds** when every link holds on the mean and in at least ``level`` (0.8) of
its seed comparisons; **✗ fails** when some link fails on the mean and its opposite holds in at
least ``level`` of them; **? inconclusive** otherwise: a term without a value (not run,
unsupported, failed), fewer than ``min_seeds`` (3) seeds of a term (or pairs of related runs),
seeds that split, a term
whose row the report marks ``not learned`` (judged at its training length: a run that never
learned its task says nothing past it), two or more terms all at chance at the claim's length by
the report's rule (``report.chance.cell_at_chance``: an accuracy within its margin of chance,
whether compared as values or as ``×r``: ``0 >= 0`` says nothing), or an MRR term ranked in no
task. One term that learned its task, at chance at the claim's length and compared with a number
(``rope <= 0.1 at 2x``), is judged: that value is the measurement (the papers' finding).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from posx.claims.effective import measure_effective
from posx.claims.language import ClaimsFile
from posx.claims.measure import links, measure_mrr, measure_values
from posx.claims.verdict import (
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    LEVEL,
    MIN_SEEDS,
    SYMBOLS,
    Verdict,
    decide,
)

EMPTY = "no runs of this preset under the root"  # every claim's reason where no row is left

__all__ = [
    "FAILS",
    "HOLDS",
    "INCONCLUSIVE",
    "LEVEL",
    "MIN_SEEDS",
    "SYMBOLS",
    "Verdict",
    "check_claims",
    "exit_code",
]


def check_claims(
    frame: pd.DataFrame,
    claims: ClaimsFile,
    min_seeds: int = MIN_SEEDS,
    level: float = LEVEL,
    empty: str = EMPTY,
) -> list[Verdict]:
    """Every claim of ``claims`` on ``frame``, the preset's normalised eval rows (mode full).

    Args:
        frame: Eval rows (``report.data.load_evals``) of the preset's runs, duplicates dropped.
        claims: The preset's parsed claims file.
        min_seeds: Seeds each term needs for a ✓ or ✗.
        level: The seed agreement a ✓ (or, for the opposite, a ✗) needs.
        empty: Every claim's reason where ``frame`` has no rows.
    """
    out = []
    for claim in claims.claims:
        verdict = Verdict(claims.experiment, claims.paper, claim)
        if frame.empty:
            verdict.reason = empty
        elif claim.statement.mrr:
            measure_mrr(verdict, frame)
        elif claim.statement.effective:
            measure_effective(verdict, frame)
        else:
            measure_values(verdict, frame)
        if not verdict.reason:
            values = {m.term: m for m in verdict.measured}
            verdict.links = links(claim.statement, values, paired=claim.statement.mrr)
            verdict.seeds = min(len(m.seeds) for m in verdict.measured)
            verdict.notes += [link.note for link in verdict.links if link.note]
        elif verdict.measured:
            verdict.seeds = min(len(m.seeds) for m in verdict.measured)
        out.append(decide(verdict, min_seeds, level))
    return out


def exit_code(verdicts: Sequence[Verdict]) -> int:
    """0: every claim holds; 1: some claim fails; 3: none fails, some are inconclusive."""
    if any(v.verdict == FAILS for v in verdicts):
        return 1
    return 3 if any(v.verdict == INCONCLUSIVE for v in verdicts) else 0
