"""Chance and learning: exact match above chance, and which runs learned their task at all.

A model that has not learned a task at its training length says nothing about extrapolation,
and a number at the task's chance level says nothing about the encoding. So:

- **Above chance.** Where a task's eval rows record a chance level (``chance``, the exact match
  of the best prompt-blind answer, written by the evaluator from the task; 0.0 for answers of
  several tokens) above 0, its exact match is shown as ``(exact_match - chance) / (1 - chance)``:
  0 = chance, 1 = every sequence right, negative = below chance. Rows without the column (runs
  evaluated before it existed) count as chance 0, i.e. unchanged.
- **At chance.** A value of an accuracy-like metric is at chance when it lies no more than its
  ``margin`` above chance (:func:`cell_at_chance`). The margin is twice the binomial standard
  error of chance (``2 sqrt(c / ((1 - c) N))`` in above-chance units, N = sequences scored) and
  at least ``3 / N``, the rule of three (the 95% bound on a rate with no success in N): where
  chance is 0 the margin is ``3 / N``, not 0, so one or two lucky sequences out of a thousand
  stay at chance. Rows that record no N (older runs) and metrics other than exact match get
  margin 0. For exact match at chance 0 and at chance 0.5, 1000 sequences each:

  >>> rows = pd.DataFrame({"task": ["copy", "parity"], "metric": "exact_match",
  ...                      "value": [0.002, 0.5], "chance": [0.0, 0.5], "sequences": 1000})
  >>> above_chance(rows)["margin"].round(4).tolist()
  [0.003, 0.0632]

- **Learned.** A row learned its task when its value at its own training length reaches
  ``learned`` (accuracy-like metrics, in above-chance units; default 0.5) or, for lower-is-better
  metrics, stays at or below ``learned_loss`` (off unless set). A row never evaluated at its
  training length counts as learned (nothing says otherwise).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from posx.errors import ConfigError
from posx.report.data import lower_is_better

ABOVE_CHANCE = "exact_match_above_chance"
LEARNED = 0.5  # the default share of the way from chance to perfect at the training length
NOT_LEARNED = "not learned"


def is_accuracy(metric: str) -> bool:
    """Whether a metric is a fraction right (``acc*``, ``exact*``), where 0 and chance mean
    nothing learned; losses and timings are not."""
    return metric.split("/")[0].startswith(("acc", "exact"))


def cell_at_chance(metric: str, mean: float, margin: float) -> bool:
    """Whether a table cell's value says nothing about the encoding: an accuracy-like metric
    (:func:`is_accuracy`) whose mean lies no more than ``margin`` above chance.

    The report's ranking and ``posx check`` both ask this of a cell, so a column the ranking
    calls "at chance" is one no claim can order either.

    Args:
        metric: The cell's metric (``exact_match_above_chance``, ``acc``, ``bpb``, ...).
        mean: The cell's value in the table's units (above chance where the task has a chance
            level, so chance is 0).
        margin: The cell's ``margin`` from :func:`above_chance` (0 for metrics without one).

    Returns:
        True for an accuracy at or below its margin (below chance included); False for a loss
        or timing, and for a missing value (NaN), which is missing rather than at chance.
    """
    return is_accuracy(metric) and bool(mean <= margin)


def check_thresholds(learned: float, learned_loss: float | None) -> None:
    """Raises ConfigError naming the option when a threshold is out of range."""
    if not 0 <= learned <= 1:
        raise ConfigError(
            f"--learned must be between 0 and 1 (exact match above chance at the training "
            f"length; 0 = off), got {learned}"
        )
    if learned_loss is not None and not (learned_loss > 0 and math.isfinite(learned_loss)):
        raise ConfigError(f"--learned-loss must be a positive number, got {learned_loss}")


def unknown_chance(frame: pd.DataFrame) -> str | None:
    """A warning naming the tasks whose exact-match rows record no chance level (evaluated
    before posx wrote one), or None."""
    if "exact_match" not in frame:
        return None
    chance = frame["chance"] if "chance" in frame else pd.Series(np.nan, index=frame.index)
    old = frame[(frame["status"] == "ok") & frame["exact_match"].notna() & chance.isna()]
    if old.empty:
        return None
    tasks = ", ".join(sorted(set(old["task"].astype(str))))
    return (
        f"{old['run_dir'].nunique()} run(s) of {tasks} have no chance level (evaluated before "
        "posx recorded one), so their exact match is not measured above chance; run `posx eval` "
        "on them again to record it"
    )


def above_chance(frame: pd.DataFrame) -> pd.DataFrame:
    """Rescales ``value`` of exact-match rows to above-chance units, per task, and adds ``margin``.

    Args:
        frame: Eval rows with ``task``, ``metric`` and ``value`` (and ``chance``, ``sequences``
            where recorded).

    Returns:
        The rows, the tasks with a chance level above 0 now in metric ``exact_match_above_chance``;
        ``margin`` is how far above chance a value may lie and still be at chance: two
        standard errors of the chance rate, and at least 3/n (n = sequences scored).
    """
    frame = frame.copy()
    raw = frame["chance"] if "chance" in frame else pd.Series(np.nan, index=frame.index)
    chance = pd.to_numeric(raw, errors="coerce")
    # A hostile or damaged value outside [0, 1) cannot be a chance level: unknown, i.e. 0.
    chance = chance.where((chance >= 0) & (chance < 1)).fillna(0.0)
    exact = frame["metric"] == "exact_match"
    tasks = set(frame.loc[exact & (chance > 0), "task"])
    rescale = exact & frame["task"].isin(tasks)
    frame.loc[rescale, "value"] = (frame.loc[rescale, "value"] - chance[rescale]) / (
        1 - chance[rescale]
    )
    frame.loc[rescale, "metric"] = ABOVE_CHANCE
    raw_n = frame["sequences"] if "sequences" in frame else pd.Series(np.nan, index=frame.index)
    n = pd.to_numeric(raw_n, errors="coerce")
    n = n.where(n > 0)
    # Two standard errors of a chance-level rate, in above-chance units; at chance 0 that is 0,
    # so the rule of three (3/n: the 95% bound on a rate with no success in n) keeps one or two
    # lucky sequences out of a thousand from ranking a column that is really at zero.
    margin = np.maximum(2 * np.sqrt(chance / ((1 - chance) * n)), 3 / n)
    frame["margin"] = margin.where(exact, 0.0).fillna(0.0)
    return frame


def learned_rows(
    summary: pd.DataFrame,
    keys: list[str],
    learned: float = LEARNED,
    learned_loss: float | None = None,
) -> pd.Series:
    """Whether each summary row's configuration learned its task (see the module docstring).

    Args:
        summary: ``tables.summarize``'s long table (``metric``, ``mean``, ``n``, ``train_length``,
            ``eval_length``).
        keys: Columns that identify one configuration's row of a table.
        learned: Threshold for accuracy-like metrics (0 = every run counts as learned).
        learned_loss: Threshold for lower-is-better metrics (None = every run counts).

    Returns:
        Bool per summary row, aligned with ``summary``.
    """
    ident = _ident(summary, keys)
    home = summary[(summary["eval_length"] == summary["train_length"]) & (summary["n"] > 0)]
    failed = {
        ident[i]
        for i, metric, value in zip(home.index, home["metric"], home["mean"], strict=True)
        if not value_learned(str(metric), float(value), learned, learned_loss)
    }
    return ~ident.isin(failed)


def value_learned(
    metric: str, value: float, learned: float = LEARNED, learned_loss: float | None = None
) -> bool:
    """Whether one value at the training length (a row's mean, or one seed's) counts as
    learned: an accuracy-like metric at or above ``learned``, a lower-is-better one at or
    below ``learned_loss``; every value where the threshold is off."""
    if is_accuracy(metric) and learned > 0:
        return value >= learned
    if not is_accuracy(metric) and lower_is_better(metric) and learned_loss is not None:
        return value <= learned_loss
    return True


def seeds_not_learned(
    rows: pd.DataFrame,
    summary: pd.DataFrame,
    keys: list[str],
    learned: float = LEARNED,
    learned_loss: float | None = None,
) -> pd.Series:
    """How many seeds of each summary row's configuration did not learn its task: the same
    rule as :func:`learned_rows`, asked of each seed's own value at the training length.

    A row whose mean learned may still hold a seed that did not (0.95, 0.95, 0.02 at the
    training length: mean 0.64); the report marks it and ``posx check`` leaves that seed out.

    Args:
        rows: Eval rows with ``metric``, ``value`` (in the table's units), ``seed``,
            ``train_length`` and ``eval_length``, one per seed and configuration and length.
        summary: ``tables.summarize``'s long table.
        keys: Columns that identify one configuration's row of a table.
        learned: Threshold for accuracy-like metrics (0 = off).
        learned_loss: Threshold for lower-is-better metrics (None = off).

    Returns:
        Int per summary row, aligned with ``summary``.
    """
    home = rows[(rows["eval_length"] == rows["train_length"]) & rows["value"].notna()]
    below = [
        not value_learned(str(m), float(v), learned, learned_loss)
        for m, v in zip(home["metric"], home["value"], strict=True)
    ]
    failed = home[pd.Series(below, index=home.index, dtype=bool)]
    counts = failed.assign(_ident=_ident(failed, keys)).groupby("_ident")["seed"].nunique()
    return _ident(summary, keys).map(counts).fillna(0).astype(int)


def _ident(frame: pd.DataFrame, keys: list[str]) -> pd.Series:
    """One string per configuration (the values of ``keys``)."""
    if frame.empty:
        return pd.Series("", index=frame.index, dtype=str)
    return frame[keys].astype(str).agg("\x1f".join, axis=1)
