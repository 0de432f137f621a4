"""Ranking across tasks by mean reciprocal rank, the aggregate of Kazemnejad et al. (2023).

Each table (a task at one model size, training length and mode) is one scenario. Within it,
every row that learned the task (:mod:`posx.report.chance`) gets a score, the mean of its metric
over the ranked eval lengths (by default those past the training length), and rows are ranked
by score; tied scores share their average rank (1, 2.5, 2.5, 4), so a tie neither rewards nor
punishes. A row that has no value at some ranked length (unsupported, failed, not run) ranks
below every row that has them all.

A row that did not learn the task ranks last in a ranked scenario, below every learned row;
several such rows tie for the last places and share their average rank (two below two learned
rows: 3.5 each). So every row of a scenario counts in its MRR, and a variant never gains by
failing: leaving a failed task out of its mean would raise it (rank 1 on copy and failing
reverse would average 1.0, above ranks 2 and 1 on both).

A scenario of an accuracy-like metric where no learned row is above chance (exact match 0, or
within noise of the task's chance level) at any ranked length carries no rank for any row:
ordering noise would say nothing; nor does one where no row learned the task. The mean
reciprocal rank of a row is ``mean(1 / rank)`` over the scenarios it was ranked in; ``tasks``
says how many that is.
"""

from __future__ import annotations

import math
from collections import Counter

import pandas as pd

from posx.errors import ConfigError
from posx.report.chance import NOT_LEARNED, cell_at_chance, is_accuracy
from posx.report.data import lower_is_better
from posx.report.tables import WideTable

RANK_LENGTHS = ("ood", "all")
AT_CHANCE = "at chance"  # a scenario where no ranked row is above chance (or 0) carries no rank


def ranked_lengths(table: WideTable, which: str = "ood") -> list[int]:
    """Eval lengths a scenario ranks on: past every row's training length, or all of them.

    When no length lies past the training length, all lengths are used.
    """
    if which not in RANK_LENGTHS:
        raise ConfigError(f"unknown --rank-lengths {which!r}; choose from ood, all")
    longest_train = max(table.train_lengths.values())
    past = [x for x in table.lengths if x > longest_train]
    return past if which == "ood" and past else list(table.lengths)


def scenario_scores(table: WideTable, which: str = "ood") -> pd.Series:
    """Each ranked row's mean metric over the ranked lengths; ±inf (worst) when one is missing.

    Rows that did not learn their task (``table.not_learned``) are left out.
    """
    lower = lower_is_better(table.metric.split("/")[0])
    worst = math.inf if lower else -math.inf
    lengths = ranked_lengths(table, which)
    scores = {}
    for row in (r for r in table.rows if r not in table.not_learned):
        values = [table.cell(row, x).mean if table.cell(row, x).n else worst for x in lengths]
        scores[row] = worst if worst in values else sum(values) / len(values)
    return pd.Series(scores, dtype=float)


def at_chance(table: WideTable, which: str = "ood") -> bool:
    """Whether no ranked row of an accuracy-like table is above chance (or zero) on the ranked
    lengths: such a column tells the rows apart only by noise, so it carries no rank."""
    if not is_accuracy(table.metric):
        return False
    lengths = ranked_lengths(table, which)
    for row in (r for r in table.rows if r not in table.not_learned):
        cells = [table.cell(row, x) for x in lengths]
        if any(c.n and not cell_at_chance(table.metric, c.mean, c.margin) for c in cells):
            return False
    return True


def scenario_ranks(table: WideTable, which: str = "ood") -> pd.Series:
    """Ranks (1 = best) of the table's rows; ties share their average rank (1, 2.5, 2.5, 4).

    Learned rows are ranked by score; rows that did not learn rank below all of them, tied for
    the last places. Empty when the column is at chance (``at_chance``) or no row learned.
    """
    if at_chance(table, which):
        return pd.Series(dtype=float)
    scores = scenario_scores(table, which)
    if scores.empty:
        return pd.Series(dtype=float)
    ranks = scores.rank(method="average", ascending=lower_is_better(table.metric.split("/")[0]))
    failed = [r for r in table.rows if r in table.not_learned]
    # the last len(failed) places, shared: the mean of len(scores) + 1 ... len(scores) + len(failed)
    last = len(scores) + (len(failed) + 1) / 2
    return pd.concat([ranks, pd.Series(last, index=failed, dtype=float)])


def scenario_names(tables: list[WideTable]) -> list[str]:
    """Short unique column names: the task, plus whatever else differs between tables."""
    keys = [k for k in ("task", "model", "train_length", "mode") if k in tables[0].meta]
    varying = [k for k in keys if len({str(t.meta.get(k)) for t in tables}) > 1]
    shown = ["task", *(k for k in varying if k != "task")] if "task" in keys else varying
    prefix = {"task": "", "model": "model=", "train_length": "L=", "mode": ""}
    names = []
    for t in tables:
        name = " · ".join(f"{prefix[k]}{t.meta[k]}" for k in shown) or t.metric
        names.append(name)
    # --by task folds every task into one table; number identical names so columns stay apart
    counts = Counter(names)
    seen: Counter[str] = Counter()
    unique = []
    for name in names:
        seen[name] += 1
        unique.append(f"{name} #{seen[name]}" if counts[name] > 1 else name)
    return unique


def rank_table(tables: list[WideTable], which: str = "ood") -> pd.DataFrame:
    """Rows sorted by mean reciprocal rank, with the rank in every scenario beside it.

    Returns:
        Columns ``variant``, ``mrr`` (NaN for a row ranked nowhere), ``tasks`` (scenarios the
        row was ranked in: the MRR's denominator) and one column per scenario holding the row's
        rank there (a float: ties share an average rank), ``<rank> (not learned)`` (ranked
        last: the row did not learn that task), ``not learned`` (a scenario no row learned, or
        at chance), ``at chance`` (no learned row of that scenario was above chance) or
        ``<NA>`` where it was not run.
    """
    if not tables:
        return pd.DataFrame(columns=["variant", "mrr", "tasks"])
    names = scenario_names(tables)
    ranks = pd.DataFrame(
        {name: scenario_ranks(t, which) for name, t in zip(names, tables, strict=True)},
        index=sorted({r for t in tables for r in t.rows}),
        dtype=float,
    )
    shown = ranks.astype(object)
    for name, t in zip(names, tables, strict=True):
        for row in t.rows:
            if row in t.not_learned:
                rank = ranks.loc[row, name]
                shown.loc[row, name] = NOT_LEARNED if pd.isna(rank) else f"{rank:g} ({NOT_LEARNED})"
            elif pd.isna(ranks.loc[row, name]):
                shown.loc[row, name] = AT_CHANCE
    shown = shown.where(shown.notna(), pd.NA)
    out = pd.DataFrame(
        {
            "variant": ranks.index,
            "mrr": (1.0 / ranks).mean(axis=1, skipna=True).to_numpy(),
            "tasks": ranks.notna().sum(axis=1).to_numpy(),
        }
    )
    out = pd.concat([out, shown.reset_index(drop=True)], axis=1)
    return out.sort_values(
        ["mrr", "variant"], ascending=[False, True], na_position="last"
    ).reset_index(drop=True)
