"""Checks a preset's claims against the runs under a results root.

The runs of a preset are those whose ``run.json`` records it (``experiment``, from the config's
``experiment_name``; else the saved config's ``experiment_name``); the claims come from posx's
own ``configs/claims/NAME.yaml`` (or a user config dir's), never from a run directory.

**The rule.** A claim ``A op B [op C ...]`` is a chain of links ``A op B``. Each named term has
one value per seed (its metric, or ``×r``, at the claim's length; for ``mrr:`` the MRR of the
ranking built from that seed's runs alone). Per link:

- *on the mean*: the link holds for the seed means (for ``mrr:``, the MRR of the report's
  ranking of the seed-mean tables);
- *seed agreement*: the fraction of seed-level comparisons for which it holds: every pair of a
  seed of A with a seed of B (runs of different encodings are independent), a seed against a
  number, and for ``mrr:`` the seeds themselves (each seed is one whole ranking).

The verdict: **✓ holds** when every link holds on the mean and in at least ``level`` (0.8) of
its seed comparisons; **✗ fails** when some link fails on the mean and its opposite holds in at
least ``level`` of them; **? inconclusive** otherwise: a term without a value (not run,
unsupported, failed), fewer than ``min_seeds`` (3) seeds of a term, seeds that split, exact
matches all at chance (``0 >= 0`` says nothing), or an MRR term ranked in no task.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import product

import pandas as pd

from posx.claims.language import Claim, ClaimsFile, Statement, Term
from posx.report.chance import above_chance
from posx.report.data import add_ratio, metric_by_task
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


def measure_values(verdict: Verdict, frame: pd.DataFrame) -> None:
    """Fills the verdict's measured values for a claim at one length (not ``mrr:``)."""
    st = verdict.claim.statement
    tasks = sorted(set(frame["task"].astype(str)))
    task = st.task or (tasks[0] if len(tasks) == 1 else None)
    if task is None or task not in tasks:
        verdict.reason = (
            f"no runs of task {task!r} (tasks: {', '.join(tasks)})"
            if task
            else f"runs of several tasks ({', '.join(tasks)}); name one with 'on TASK'"
        )
        return
    rows = frame[frame["task"].astype(str) == task]
    metric = st.metric or metric_by_task(rows, "auto")[task]
    verdict.metric = metric
    if metric not in rows or not pd.api.types.is_numeric_dtype(rows[metric]):
        verdict.reason = f"metric {metric!r} is not recorded for task {task!r}"
        return
    rows = add_ratio(rows, metric)
    target = st.factor * rows["train_length"] if st.factor is not None else st.length
    rows = rows[rows["eval_length"] == target]
    lengths = sorted(set(rows["eval_length"]))
    verdict.where = f"{st.where()} (L={'/'.join(map(str, lengths))})" if lengths else st.where()
    for term in dict.fromkeys(t for t in st.terms if t.name is not None):
        mine = rows[rows["variant"].astype(str) == term.name]
        if mine.empty:
            have = frame[frame["task"].astype(str) == task]
            verdict.reason = f"no rows of {term.name} {st.where()} (labels: {_labels(have)})"
            return
        ok = mine[(mine["status"] == "ok") & mine[metric].notna()]
        if ok.empty:
            first = mine.iloc[0]
            verdict.reason = f"{term.name} {st.where()}: {first['status']} {first['reason']}"
            return
        if ok["fingerprint"].nunique() > 1:
            verdict.reason = (
                f"{term.name} has runs of {ok['fingerprint'].nunique()} configurations; "
                "keep one under the root"
            )
            return
        column = "ratio" if term.ratio else metric
        seeds = {int(s): float(v) for s, v in ok.groupby("seed")[column].mean().items()}
        seeds = {s: v for s, v in seeds.items() if not math.isnan(v)}
        if not seeds:
            verdict.reason = f"{term} has no value at the training length to divide by"
            return
        verdict.measured.append(Measured(str(term), seeds, sum(seeds.values()) / len(seeds)))
    if metric == "exact_match" and not any(t.ratio for t in st.terms):
        _at_chance(verdict, rows)


def _at_chance(verdict: Verdict, rows: pd.DataFrame) -> None:
    """Sets the reason when every term's exact match is within chance's margin: two values at
    zero (or at chance) satisfy ``>=`` without saying anything, as in a report column that
    carries no rank (issue 24). The margin is the report's (:func:`posx.report.chance.margin`)."""
    rows = rows.assign(value=rows["exact_match"], metric="exact_match")
    rows = above_chance(rows)
    variant = rows["variant"].astype(str)
    levels = rows.groupby(variant)["margin"].max()
    raw = rows["chance"] if "chance" in rows else pd.Series(0.0, index=rows.index)
    floor = pd.to_numeric(raw, errors="coerce").fillna(0.0).groupby(variant).mean()
    for m in verdict.measured:
        if m.mean > floor.get(m.term, 0.0) + levels.get(m.term, 0.0) * (1 - floor.get(m.term, 0.0)):
            return
    verdict.reason = (
        f"every term is at chance {verdict.where} (exact match within 3/n or two standard errors"
        " of chance): the comparison cannot tell them apart"
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
