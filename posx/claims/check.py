"""Checks a preset's claims against the runs under a results root.

The runs of a preset are those whose ``run.json`` records it (``experiment``, from the config's
``experiment_name``; else the saved config's ``experiment_name``); the claims come from posx's
own ``configs/claims/NAME.yaml`` (or a user config dir's), never from a run directory.

**The values.** A term's value is the cell ``posx report`` prints for its row at the claim's
length, read from the report's own summary (``report.tables.summarize``), never recomputed: the
metric in the table's unit (exact match above chance where the task has a chance level), or its
``×r`` (that value over the same run's at its training length). Its seed values are the cells of
``posx report --by seed``; for ``mrr:`` a seed's value is the MRR of the ranking built from that
seed's runs alone.

**The rule.** A claim ``A op B [op C ...]`` is a chain of links ``A op B``. Per link:

- *on the mean*: the link holds for the seed means (for ``mrr:``, the MRR of the report's
  ranking of the seed-mean tables);
- *seed agreement*: the fraction of seed-level comparisons for which it holds: every pair of a
  seed of A with a seed of B (runs of different encodings are independent), a seed against a
  number, and for ``mrr:`` the seeds themselves (each seed is one whole ranking).

The verdict: **✓ holds** when every link holds on the mean and in at least ``level`` (0.8) of
its seed comparisons; **✗ fails** when some link fails on the mean and its opposite holds in at
least ``level`` of them; **? inconclusive** otherwise: a term without a value (not run,
unsupported, failed), fewer than ``min_seeds`` (3) seeds of a term, seeds that split, a term
whose row the report marks ``not learned``, every term's cell at chance by the report's rule
(``report.chance.cell_at_chance``: an accuracy within its margin of chance, whether compared as
values or as ``×r``: ``0 >= 0`` says nothing), or an MRR term ranked in no task.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import product

import pandas as pd

from posx.claims.language import Claim, ClaimsFile, Statement, Term
from posx.errors import ConfigError
from posx.report.chance import LEARNED, cell_at_chance
from posx.report.rank import rank_table
from posx.report.tables import pivot, summarize

MIN_SEEDS = 3
LEVEL = 0.8
HOLDS, FAILS, INCONCLUSIVE = "holds", "fails", "inconclusive"
SYMBOLS = {HOLDS: "✓", FAILS: "✗", INCONCLUSIVE: "?"}
COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
}  # fmt: skip
OPPOSITE = {">": "<=", ">=": "<", "<": ">=", "<=": ">"}


@dataclass
class Measured:
    """A named term's values: one per seed, their mean (or the ranking's MRR) and spread."""

    term: str
    seeds: dict[int, float]
    mean: float

    @property
    def std(self) -> float:
        values = list(self.seeds.values())
        if len(values) < 2:
            return math.nan
        m = sum(values) / len(values)
        return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


@dataclass
class Link:
    """``left op right``: on the mean, and in how many of its seed comparisons."""

    left: str
    op: str
    right: str
    holds: bool
    agree: int
    total: int

    @property
    def fraction(self) -> float:
        return self.agree / self.total if self.total else math.nan

    def __str__(self) -> str:
        return f"{self.left} {self.op} {self.right}"


@dataclass
class Verdict:
    """One claim's outcome on one preset's runs."""

    experiment: str
    paper: str
    claim: Claim
    verdict: str = INCONCLUSIVE
    metric: str = ""
    where: str = ""
    measured: list[Measured] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    seeds: int = 0
    reason: str = ""

    @property
    def symbol(self) -> str:
        return SYMBOLS[self.verdict]

    def statistic(self) -> str:
        """The seed-level statistic behind the verdict: the weakest link's agreement, or for
        ✗ how often the failing link's opposite holds."""
        if not self.links or not any(link.total for link in self.links):
            return "—"
        if self.verdict == FAILS:
            link = next(x for x in self.links if not x.holds)
            against = f"{link.left} {OPPOSITE[link.op]} {link.right}"
            return f"{against}: {link.total - link.agree}/{link.total}"
        link = min((x for x in self.links if x.total), key=lambda x: x.fraction)
        return f"{link}: {link.agree}/{link.total}"


def decide(verdict: Verdict, min_seeds: int = MIN_SEEDS, level: float = LEVEL) -> Verdict:
    """Sets ``verdict.verdict`` and its reason from the links and seed counts (the rule in the
    module docstring); a verdict that already has a reason (a missing value) stays ?."""
    if verdict.reason:
        verdict.verdict = INCONCLUSIVE
        return verdict
    thin = [m for m in verdict.measured if len(m.seeds) < min_seeds]
    if thin:
        verdict.reason = (
            f"{thin[0].term} has {len(thin[0].seeds)} seed(s); a verdict needs {min_seeds}"
        )
        return verdict
    failing = [x for x in verdict.links if not x.holds]
    if not failing and all(x.fraction >= level for x in verdict.links):
        verdict.verdict = HOLDS
    elif any(1 - x.fraction >= level for x in failing):
        verdict.verdict = FAILS
        link = next(x for x in failing if 1 - x.fraction >= level)
        verdict.links = [link, *(x for x in verdict.links if x is not link)]
        verdict.reason = f"{link} fails on the mean"
    else:
        split = failing[0] if failing else min(verdict.links, key=lambda x: x.fraction)
        verdict.reason = (
            f"seeds split: {split} holds in {split.agree} of {split.total} seed comparisons "
            f"(a verdict needs {level:.0%} either way)"
        )
    return verdict


def _link(a: Term, op: str, b: Term, values: dict[str, Measured], paired: bool) -> Link:
    compare = COMPARE[op]

    def side(t: Term) -> tuple[float, dict[int, float] | None]:
        if t.name is None:
            return float(t.number or 0.0), None
        m = values[str(t)]
        return m.mean, m.seeds

    mean_a, seeds_a = side(a)
    mean_b, seeds_b = side(b)
    if seeds_a is None or seeds_b is None:  # one side is a number: each seed against it
        seeds = seeds_a if seeds_a is not None else seeds_b or {}
        pairs = [(v, mean_b) if seeds_a is not None else (mean_a, v) for v in seeds.values()]
    elif paired:
        pairs = [(seeds_a[s], seeds_b[s]) for s in sorted(set(seeds_a) & set(seeds_b))]
    else:
        pairs = list(product(seeds_a.values(), seeds_b.values()))
    agree = sum(compare(x, y) for x, y in pairs)
    return Link(str(a), op, str(b), compare(mean_a, mean_b), agree, len(pairs))


def _links(st: Statement, values: dict[str, Measured], paired: bool) -> list[Link]:
    return [
        _link(a, op, b, values, paired)
        for a, op, b in zip(st.terms, st.ops, st.terms[1:], strict=False)
    ]


def _labels(frame: pd.DataFrame) -> str:
    return ", ".join(sorted(set(frame["variant"].astype(str)))) or "none"


def _task_rows(verdict: Verdict, frame: pd.DataFrame) -> pd.DataFrame | None:
    """The eval rows of the claim's task (``on TASK``, or the preset's only task); None, with
    the verdict's reason set, when there is no such task or several and none named."""
    st = verdict.claim.statement
    tasks = sorted(set(frame["task"].astype(str)))
    task = st.task or (tasks[0] if len(tasks) == 1 else None)
    if task is None or task not in tasks:
        verdict.reason = (
            f"no runs of task {task!r} (tasks: {', '.join(tasks)})"
            if task
            else f"runs of several tasks ({', '.join(tasks)}); name one with 'on TASK'"
        )
        return None
    return frame[frame["task"].astype(str) == task]


def _summaries(verdict: Verdict, rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The report's summary of one task's rows (``tables.summarize``, the code behind every
    number ``posx report`` prints): per configuration, and per seed (``posx report --by seed``).

    A claim reads its values from these and nothing else, so it sees the report's numbers:
    exact match above chance where the task has a chance level, ×r of that, the margin of
    chance and the ``not learned`` mark. None, with the reason set, for a metric the rows do
    not record.
    """
    metric = verdict.claim.statement.metric or "auto"
    try:
        cells = summarize(rows, metric)
        seeds = summarize(rows, metric, by=("seed",))
    except ConfigError as err:
        verdict.reason = str(err)
        return None
    verdict.metric = "/".join(sorted(set(cells["metric"].astype(str))))
    return cells, seeds


def _at_length(verdict: Verdict, summary: pd.DataFrame) -> pd.DataFrame:
    """The summary's cells at the claim's length (``at 4x``: each row's own training length
    times 4)."""
    st = verdict.claim.statement
    target = st.factor * summary["train_length"] if st.factor is not None else st.length
    return summary[summary["eval_length"] == target]


def _not_learned(name: str, cells: pd.DataFrame) -> str:
    """Why a term the report marks ``not learned`` has no verdict, with its value at the
    training length."""
    home = cells[(cells["eval_length"] == cells["train_length"]) & (cells["n"] > 0)]
    value = f" ({home['metric'].iloc[0]} {home['mean'].iloc[0]:.3f})" if len(home) else ""
    return (
        f"{name} is not learned at its training length{value}, below the report's "
        f"--learned {LEARNED}: its values past it say nothing about extrapolation"
    )


def _measure(verdict: Verdict, term: Term, cells: pd.DataFrame, seeds: pd.DataFrame) -> None:
    """Adds one named term's report cell (its mean, or ×r) and per-seed cells to the verdict,
    or sets the reason it has none (not run, failed, several configurations, not learned)."""
    where = verdict.claim.statement.where()
    mine = cells[cells["variant"].astype(str) == term.name]
    here = _at_length(verdict, mine)
    ok = here[here["n"] > 0]
    if here.empty:
        verdict.reason = f"no rows of {term.name} {where} (labels: {_labels(cells)})"
    elif ok.empty:
        first = here.iloc[0]
        verdict.reason = f"{term.name} {where}: {first['status']} {first['reason']}"
    elif ok["fingerprint"].nunique() > 1:
        verdict.reason = (
            f"{term.name} has runs of {ok['fingerprint'].nunique()} configurations; "
            "keep one under the root"
        )
    elif not ok["learned"].all():
        verdict.reason = _not_learned(term.name, mine)
    if verdict.reason:
        return
    column = "ratio_mean" if term.ratio else "mean"
    mine = _at_length(verdict, seeds[seeds["variant"].astype(str) == term.name])
    per_seed = {int(s): float(v) for s, v in zip(mine["seed"], mine[column], strict=True)}
    per_seed = {s: v for s, v in per_seed.items() if not math.isnan(v)}
    mean = float(ok[column].iloc[0])
    if math.isnan(mean) or not per_seed:
        verdict.reason = f"{term} has no value at the training length to divide by"
        return
    verdict.measured.append(Measured(str(term), per_seed, mean))


def measure_values(verdict: Verdict, frame: pd.DataFrame) -> None:
    """Fills the verdict's measured values for a claim at one length (not ``mrr:``): each
    term's cell of ``posx report``'s table, and its cell in each seed's."""
    st = verdict.claim.statement
    rows = _task_rows(verdict, frame)
    summaries = _summaries(verdict, rows) if rows is not None else None
    if summaries is None:
        return
    cells, seeds = summaries
    lengths = sorted(set(_at_length(verdict, cells)["eval_length"]))
    verdict.where = f"{st.where()} (L={'/'.join(map(str, lengths))})" if lengths else st.where()
    for term in dict.fromkeys(t for t in st.terms if t.name is not None):
        _measure(verdict, term, cells, seeds)
        if verdict.reason:
            return
    _at_chance(verdict, _at_length(verdict, cells))


def _at_chance(verdict: Verdict, cells: pd.DataFrame) -> None:
    """Sets the reason when every term's cell is at chance (:func:`cell_at_chance`, the
    report's rule): two values at zero (or at chance) satisfy ``>=`` without saying anything,
    whether compared as values or as ×r, as in a report column that carries no rank."""
    names = verdict.claim.statement.names
    mine = cells[cells["variant"].astype(str).isin(names) & (cells["n"] > 0)]
    for rec in mine.itertuples():
        if not cell_at_chance(str(rec.metric), float(rec.mean), float(rec.margin)):
            return
    rule = f"{verdict.metric} within the report's margin of chance: 3/n or two standard errors"
    verdict.reason = (
        f"{names[0]} is at chance {verdict.where} ({rule}): its value cannot be told from chance"
        if len(names) == 1
        else f"every term is at chance {verdict.where} ({rule}): the comparison cannot tell "
        "them apart"
    )


def _mrr(frame: pd.DataFrame, metric: str) -> dict[str, float]:
    tables = pivot(summarize(frame, metric))
    ranked = rank_table(tables, "ood")
    return dict(zip(ranked["variant"].astype(str), ranked["mrr"].astype(float), strict=True))


def measure_mrr(verdict: Verdict, frame: pd.DataFrame) -> None:
    """Fills the verdict's measured MRRs: the report's ranking of the seed means, and one
    ranking per seed (the runs of that seed alone)."""
    st = verdict.claim.statement
    verdict.metric = f"mrr of {st.metric or 'auto'}"
    verdict.where = f"past training, {frame['task'].nunique()} task(s)"
    means = _mrr(frame, st.metric or "auto")
    per_seed = {int(s): _mrr(part, st.metric or "auto") for s, part in frame.groupby("seed")}
    for name in st.names:
        if name not in means:
            verdict.reason = f"no runs of {name} (labels: {', '.join(sorted(means)) or 'none'})"
            return
        seeds = {s: r[name] for s, r in per_seed.items() if name in r and not math.isnan(r[name])}
        if math.isnan(means[name]) or not seeds:
            verdict.reason = (
                f"{name} has no MRR: ranked in no task (not learned, or every task at chance)"
            )
            return
        verdict.measured.append(Measured(name, seeds, means[name]))


def check_claims(
    frame: pd.DataFrame,
    claims: ClaimsFile,
    min_seeds: int = MIN_SEEDS,
    level: float = LEVEL,
) -> list[Verdict]:
    """Every claim of ``claims`` on ``frame``, the preset's normalised eval rows (mode full).

    Args:
        frame: Eval rows (``report.data.load_evals``) of the preset's runs, duplicates dropped.
        claims: The preset's parsed claims file.
        min_seeds: Seeds each term needs for a ✓ or ✗.
        level: The seed agreement a ✓ (or, for the opposite, a ✗) needs.
    """
    out = []
    for claim in claims.claims:
        verdict = Verdict(claims.experiment, claims.paper, claim)
        if frame.empty:
            verdict.reason = "no runs of this preset under the root"
        elif claim.statement.mrr:
            measure_mrr(verdict, frame)
        else:
            measure_values(verdict, frame)
        if not verdict.reason:
            values = {m.term: m for m in verdict.measured}
            verdict.links = _links(claim.statement, values, paired=claim.statement.mrr)
            verdict.seeds = min(len(m.seeds) for m in verdict.measured)
        elif verdict.measured:
            verdict.seeds = min(len(m.seeds) for m in verdict.measured)
        out.append(decide(verdict, min_seeds, level))
    return out


def exit_code(verdicts: Sequence[Verdict]) -> int:
    """0: every claim holds; 1: some claim fails; 3: none fails, some are inconclusive."""
    if any(v.verdict == FAILS for v in verdicts):
        return 1
    return 3 if any(v.verdict == INCONCLUSIVE for v in verdicts) else 0
