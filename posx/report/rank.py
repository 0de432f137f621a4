"""Ranking across tasks by mean reciprocal rank, the aggregate of Kazemnejad et al. (2023).

Each table (a task at one model size, training length and mode) is one scenario. Within it,
every row gets a score, the mean of its metric over the ranked eval lengths (by default those
past the training length), and rows are ranked by score (ties share the best rank: 1, 2, 2, 4).
A row that has no value at some ranked length (unsupported, failed, not run) ranks below every
row that has them all. The mean reciprocal rank of a row is ``mean(1 / rank)`` over the
scenarios it appears in; ``tasks`` says how many that is.
"""

from __future__ import annotations

import math
from collections import Counter

import pandas as pd

from posx.errors import ConfigError
from posx.report.data import lower_is_better
from posx.report.tables import WideTable

RANK_LENGTHS = ("ood", "all")


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
    """Each row's mean metric over the ranked lengths; ±inf (worst) when one is missing."""
    lower = lower_is_better(table.metric.split("/")[0])
    worst = math.inf if lower else -math.inf
    lengths = ranked_lengths(table, which)
    scores = {}
    for row in table.rows:
        values = [table.cell(row, x).mean if table.cell(row, x).n else worst for x in lengths]
        scores[row] = worst if worst in values else sum(values) / len(values)
    return pd.Series(scores, dtype=float)


def scenario_ranks(table: WideTable, which: str = "ood") -> pd.Series:
    """Competition ranks (1 = best) of the table's rows."""
    scores = scenario_scores(table, which)
    return scores.rank(method="min", ascending=lower_is_better(table.metric.split("/")[0])).astype(
        int
    )


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
        Columns ``variant``, ``mrr``, ``tasks`` (scenarios the row appears in) and one column
        per scenario holding the row's rank there (``<NA>`` where it was not run).
    """
    if not tables:
        return pd.DataFrame(columns=["variant", "mrr", "tasks"])
    names = scenario_names(tables)
    ranks = pd.DataFrame(
        {name: scenario_ranks(t, which) for name, t in zip(names, tables, strict=True)}
    )
    ranks = ranks.astype("Int64")
    out = pd.DataFrame(
        {
            "variant": ranks.index,
            "mrr": (1.0 / ranks.astype(float)).mean(axis=1, skipna=True).to_numpy(),
            "tasks": ranks.notna().sum(axis=1).to_numpy(),
        }
    )
    out = pd.concat([out, ranks.reset_index(drop=True)], axis=1)
    return out.sort_values(["mrr", "variant"], ascending=[False, True]).reset_index(drop=True)
