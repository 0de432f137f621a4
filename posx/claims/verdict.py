"""The verdict of one claim: what was measured per term, the links of its chain, and the rule
that decides ✓ holds, ✗ fails or ? inconclusive (:func:`decide`; the rule is spelled out in
:mod:`posx.claims.check`)."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field

from posx.claims.language import Claim

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
    # seed -> (its run's lineage key, its parent's): runs that share a parent pair by it
    lineage: dict[int, tuple[str, str]] = field(default_factory=dict)
    # seeds of the term's row that are not in ``seeds``, and why (did not learn the task)
    left_out: dict[int, str] = field(default_factory=dict)

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
    paired: bool = False  # related runs, matched one to one (posx.claims.lineage)
    note: str = ""  # related runs left without a partner: how many, and the means compared
    margin: float = math.nan  # the left mean minus the right one, as "on the mean" compares them
    spread: float = math.nan  # sample std of the single comparisons' differences (NaN: < 2)

    @property
    def near_bound(self) -> bool:
        """Whether the means are within one spread of each other: a seed set drawn again may
        well land on the other side (a flag, not a test)."""
        return bool(abs(self.margin) <= self.spread)

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
    # what else the verdict rests on: seeds left out, how runs were paired (shown with the reason)
    notes: list[str] = field(default_factory=list)
    near_bound: bool = False  # a ✓ or ✗ whose deciding link is within its seeds' spread

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
        left = f" ({len(thin[0].left_out)} left out)" if thin[0].left_out else ""
        verdict.reason = (
            f"{thin[0].term} has {len(thin[0].seeds)} seed(s){left}; a verdict needs {min_seeds}"
        )
        return verdict
    few = [x for x in verdict.links if x.paired and x.total < min_seeds]
    if few:
        verdict.reason = (
            f"{few[0]} has {few[0].total} paired comparison(s) of related runs; a verdict "
            f"needs {min_seeds}"
        )
        return verdict
    failing = [x for x in verdict.links if not x.holds]
    if not failing and all(x.fraction >= level for x in verdict.links):
        verdict.verdict = HOLDS
        _mark_near(verdict, verdict.links)
    elif any(1 - x.fraction >= level for x in failing):
        verdict.verdict = FAILS
        link = next(x for x in failing if 1 - x.fraction >= level)
        verdict.links = [link, *(x for x in verdict.links if x is not link)]
        verdict.reason = f"{link} fails on the mean"
        _mark_near(verdict, [link])
    else:
        split = failing[0] if failing else min(verdict.links, key=lambda x: x.fraction)
        verdict.reason = (
            f"seeds split: {split} holds in {split.agree} of {split.total} seed comparisons "
            f"(a verdict needs {level:.0%} either way)"
        )
    return verdict


def _mark_near(verdict: Verdict, deciding: list[Link]) -> None:
    """Marks a ✓ or ✗ whose deciding link lies within one spread of its bound (the means'
    difference no larger than the std of single comparisons' differences): the verdict is
    kept, and a note says that another seed set may turn it."""
    near = next((x for x in deciding if x.near_bound), None)
    if near is None:
        return
    verdict.near_bound = True
    verdict.notes.append(
        f"near the bound: {near} by {near.margin:+.3f} on the mean, within the seeds' spread "
        f"(std {near.spread:.3f} of single comparisons): another seed set may turn it"
    )
