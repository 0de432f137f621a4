"""``effective_length:`` claims: RULER's effective length of each term, per seed.

A seed's effective length is the longest length its run evaluated whose ``ruler/average`` score,
and every shorter evaluated length's, reaches the threshold its rows record (``ruler.threshold``
when it was evaluated; :func:`posx.ruler.scoring.effective_length`, the number ``posx eval`` and
``posx report`` print); 0 when not even the shortest length reaches it.

Lengths are evaluated on a grid, so the true effective length of a seed lies in an interval:
from its effective length up to the next length evaluated, where its score fell below the
threshold (without end when it reached the longest, or the next one failed to evaluate). A
comparison with a number that falls inside that interval depends on lengths never evaluated,
and is ``?`` naming the length to evaluate; terms compared with each other must have been
evaluated at the same lengths, and terms that all reach the longest length (or none the
shortest) cannot be told apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from posx.claims.language import EFFECTIVE_TASK, Statement, Term
from posx.claims.lineage import seed_lineage
from posx.claims.verdict import Measured, Verdict
from posx.ruler.scoring import THRESHOLD, effective_length


@dataclass(frozen=True)
class Reach:
    """One seed's effective length and where its true value may lie: ``[value, upper)``.

    Attributes:
        value: The effective length (0: below the shortest length evaluated).
        upper: The next length evaluated, where the score fell below the threshold (inf:
            none, or it did not evaluate).
        lengths: The lengths evaluated.
        unscored: The next length evaluated when its row has no score (failed, unsupported).
    """

    value: int
    upper: float
    lengths: tuple[int, ...]
    unscored: int | None = None

    @property
    def at_top(self) -> bool:
        return self.value == max(self.lengths) and math.isinf(self.upper)


def _score(rec: pd.Series) -> float:
    if str(rec.get("status", "ok")) != "ok":
        return math.nan
    try:
        return float(rec.get("score"))
    except (TypeError, ValueError):
        return math.nan


def _threshold(name: str, seed: int, rows: pd.DataFrame, notes: list[str]) -> float | str:
    """The threshold one seed's rows record, or why it has none to judge by."""
    found = pd.to_numeric(rows["threshold"], errors="coerce") if "threshold" in rows else None
    values = sorted(set(found.dropna())) if found is not None else []
    if len(values) > 1:
        shown = ", ".join(f"{v:g}" for v in values)
        return (
            f"{name} seed {seed}: its ruler/average rows record thresholds {shown} (evaluated "
            "with different ruler.threshold); evaluate its lengths again with one"
        )
    if not values:
        notes.append(
            f"{name} seed {seed}: its ruler/average rows record no threshold (evaluated before "
            f"posx recorded it); judged at RULER's {THRESHOLD:g}"
        )
        return THRESHOLD
    return float(values[0])


def _reach(rows: pd.DataFrame, threshold: float) -> Reach:
    scores = {int(r["eval_length"]): _score(r) for _, r in rows.iterrows()}
    value = effective_length(scores, threshold) or 0
    lengths = tuple(sorted(scores))
    after = [n for n in lengths if n > value]
    if after and not math.isnan(scores[after[0]]):  # a score below the threshold there
        return Reach(value, float(after[0]), lengths)
    return Reach(value, math.inf, lengths, after[0] if after else None)


def _term_reaches(
    verdict: Verdict, name: str, rows: pd.DataFrame
) -> tuple[Measured, dict[int, Reach]] | None:
    """One term's effective length per seed, or None with the verdict's reason set."""
    mine = rows[rows["variant"].astype(str) == name]
    if mine.empty:
        labels = ", ".join(sorted(set(rows["variant"].astype(str)))) or "none"
        verdict.reason = f"no ruler/average rows of {name} (labels: {labels})"
        return None
    if mine["fingerprint"].nunique() > 1:
        verdict.reason = (
            f"{name} has runs of {mine['fingerprint'].nunique()} configurations; keep one "
            "under the root"
        )
        return None
    reaches: dict[int, Reach] = {}
    for seed, part in mine.groupby("seed"):
        threshold = _threshold(name, int(seed), part, verdict.notes)
        if isinstance(threshold, str):
            verdict.reason = threshold
            return None
        reaches[int(seed)] = _reach(part.drop_duplicates("eval_length", keep="last"), threshold)
    values = {s: float(r.value) for s, r in reaches.items()}
    mean = sum(values.values()) / len(values)
    return Measured(name, values, mean, seed_lineage(mine)), reaches


def _decided(reach: Reach, op: str, number: float) -> bool:
    """Whether ``t op number`` is the same for every ``t`` in ``[value, upper)``."""
    low, high = reach.value, reach.upper
    if op in (">=", "<"):
        return low >= number or high <= number
    return low > number or high <= number  # > and <=


def _number_link(
    verdict: Verdict, term: Term, op: str, number: float, reaches: dict[int, Reach]
) -> None:
    for seed, reach in sorted(reaches.items()):
        if _decided(reach, op, number):
            continue
        past = f"falls below it at {reach.upper:g}"
        if reach.unscored is not None:
            past = f"has no score at {reach.unscored} (its row there did not evaluate)"
        elif math.isinf(reach.upper):
            past = "was not evaluated past it"
        verdict.reason = (
            f"{term.name} seed {seed} reaches the threshold up to {reach.value or 'no length'} "
            f"and {past}: whether its effective length is {op} {number:g} depends on lengths "
            f"not evaluated; evaluate it at {number:g}"
        )
        return


def _term_link(verdict: Verdict, a: str, b: str, reaches: dict[str, dict[int, Reach]]) -> None:
    grids = {n: sorted({x for r in reaches[n].values() for x in r.lengths}) for n in (a, b)}
    if grids[a] != grids[b]:
        verdict.reason = (
            f"{a} and {b} were evaluated at different lengths ({'/'.join(map(str, grids[a]))} "
            f"and {'/'.join(map(str, grids[b]))}): their effective lengths are not on one scale"
        )
        return
    every = [r for name in (a, b) for r in reaches[name].values()]
    if all(r.at_top for r in every):
        verdict.reason = (
            f"{a} and {b} reach the threshold at every length evaluated (up to "
            f"{max(grids[a])}): evaluate longer lengths to tell them apart"
        )
    elif all(r.value == 0 for r in every):
        verdict.reason = (
            f"neither {a} nor {b} reaches the threshold at the shortest length evaluated "
            f"({min(grids[a])}): evaluate shorter lengths to tell them apart"
        )


def measure_effective(verdict: Verdict, frame: pd.DataFrame) -> None:
    """Fills the verdict's measured effective lengths (one per seed of each term), or sets why
    it has none (no RULER rows, mixed thresholds, a comparison the lengths evaluated cannot
    decide)."""
    st: Statement = verdict.claim.statement
    verdict.metric = "effective length"
    rows = frame[(frame["task"].astype(str) == EFFECTIVE_TASK) & (frame["mode"] == "generate")]
    if rows.empty:
        verdict.reason = f"no {EFFECTIVE_TASK} rows: evaluate with posx eval hf:... --suite ruler"
        return
    lengths = sorted({int(n) for n in rows["eval_length"]})
    verdict.where = f"{st.where()} (L={'/'.join(map(str, lengths))})"
    reaches: dict[str, dict[int, Reach]] = {}
    for name in st.names:
        found = _term_reaches(verdict, name, rows)
        if found is None:
            return
        verdict.measured.append(found[0])
        reaches[name] = found[1]
    for a, op, b in zip(st.terms, st.ops, st.terms[1:], strict=False):
        if a.name is not None and b.name is not None:
            _term_link(verdict, a.name, b.name, reaches)
        elif a.name is not None:
            _number_link(verdict, a, op, float(b.number or 0) - a.offset, reaches[a.name])
        elif b.name is not None:
            flipped = {">": "<", ">=": "<=", "<": ">", "<=": ">="}[op]
            _number_link(verdict, b, flipped, float(a.number or 0) - b.offset, reaches[b.name])
        if verdict.reason:
            return
