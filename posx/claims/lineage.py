"""Claims paired by lineage: each seed comparison of two related terms is one pair of runs.

Two terms are related when their runs are linked; only runs with a partner on the other side
count:

- **run by run**: two rows of the same runs (``rope`` and its eval-time variant
  ``rope+yarn×4``: one model per seed, evaluated twice), matched on the run; a run that lacks
  one of the rows is left out, the others still pair;
- **by parent and seed**: siblings, extensions of the same parents (``posx extend -m RUN
  extension=pi,yarn seed=0,1,2``: pi seed s with yarn seed s, whether the parents are three
  bases or one); siblings with no seed in common pair by parent (each parent's mean);
- **child with its parent**: an extension against its base, each child run with its own
  parent's run (a parent with three children is in three pairs: ``k/n`` counts the children).

Runs of unrelated lines stay independent: every seed of one against every seed of the other.
``posx check`` then judges the means over the same runs as the pairs (:mod:`posx.claims.measure`).

A run's lineage is two keys: its own (``run name|fingerprint`` as its ``run.json`` records it)
and its parent's (an extension's ``run.json`` ``parent``: the same two words; ``""`` for a run
trained from scratch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from posx.errors import PosxError
from posx.saved import SavedRun

SELF, PARENT = "lineage_self", "lineage_parent"


def _keys(run: Path) -> tuple[str, str]:
    """``(own key, parent key)`` of one run directory; ``("", "")`` when its ``run.json``
    cannot be read (the run is then paired with nothing)."""
    saved = SavedRun(run)
    try:
        info = saved.info
        parent = saved.parent
    except PosxError:
        return "", ""
    own = f"{run.name}|{info.get('fingerprint') or ''}"
    if not parent:
        return own, ""
    return own, f"{parent.get('run') or ''}|{parent.get('fingerprint') or ''}"


def attach_lineage(frame: pd.DataFrame, root: Path) -> pd.DataFrame:
    """Adds the ``lineage_self`` and ``lineage_parent`` columns to eval rows (``run_dir``)."""
    keys = {d: _keys(root / d) for d in frame["run_dir"].unique()}
    return frame.assign(
        **{
            SELF: frame["run_dir"].map({d: k[0] for d, k in keys.items()}),
            PARENT: frame["run_dir"].map({d: k[1] for d, k in keys.items()}),
        }
    )


def seed_lineage(rows: pd.DataFrame) -> dict[int, tuple[str, str]]:
    """Seed -> ``(own key, parent key)`` of one configuration's rows (one run per seed)."""
    if SELF not in rows or PARENT not in rows:
        return {}
    first = rows.drop_duplicates("seed")
    return {
        int(s): (str(a), str(b))
        for s, a, b in zip(first["seed"], first[SELF], first[PARENT], strict=True)
    }


@dataclass(frozen=True)
class Pairing:
    """The seed-level comparisons of two related terms: which value of one goes with which of
    the other, how they were matched, and how many runs found no partner."""

    how: str  # "run by run", "by parent and seed", "by parent", "child with its parent"
    pairs: list[tuple[float, float]]
    unpaired: int


def _mean_by(values: Mapping[int, float], key: Mapping[int, object]) -> dict[object, float]:
    groups: dict[object, list[float]] = {}
    for seed, value in values.items():
        groups.setdefault(key[seed], []).append(value)
    return {k: sum(v) / len(v) for k, v in groups.items()}


def _by_key(
    a: Mapping[int, float], key_a: Mapping[int, object], b: Mapping[int, float],
    key_b: Mapping[int, object], how: str,
) -> Pairing:  # fmt: skip
    """Pairs the values whose keys match (each key one run on each side)."""
    left, right = _mean_by(a, key_a), _mean_by(b, key_b)
    shared = sorted(set(left) & set(right), key=str)
    unpaired = sum(key_a[s] not in right for s in a) + sum(key_b[s] not in left for s in b)
    return Pairing(how, [(left[k], right[k]) for k in shared], unpaired)


def _child_with_parent(
    children: Mapping[int, float], up: Mapping[int, str], parents: Mapping[int, float],
    own: Mapping[int, str], children_left: bool,
) -> Pairing:  # fmt: skip
    """Each child run against its own parent's run: a parent with three children is in three
    pairs, so ``k/n`` counts the children (their own seeds)."""
    value = {own[t]: v for t, v in parents.items()}
    pairs = [(v, value[up[s]]) for s, v in sorted(children.items()) if up[s] in value]
    used = {up[s] for s in children}
    unpaired = sum(up[s] not in value for s in children) + sum(k not in used for k in value)
    ordered = pairs if children_left else [(y, x) for x, y in pairs]
    return Pairing("child with its parent", ordered, unpaired)


def pair_runs(
    a: Mapping[int, float],
    lineage_a: Mapping[int, tuple[str, str]],
    b: Mapping[int, float],
    lineage_b: Mapping[int, tuple[str, str]],
) -> Pairing | None:
    """The pairs of a comparison between two related terms (the rule in the module docstring);
    None when the terms are unrelated (or a run's lineage is unknown), to be compared seed
    against seed. Only runs with a partner on the other side are paired: a run missing the
    other term's row is left out (``unpaired``), never a reason to stop pairing.

    Args:
        a: Seed -> value of the left term.
        lineage_a: Seed -> ``(own key, parent key)`` of the left term's runs.
        b: Seed -> value of the right term.
        lineage_b: Likewise for the right term.
    """
    if not set(a) <= set(lineage_a) or not set(b) <= set(lineage_b) or not a or not b:
        return None
    own_a = {s: lineage_a[s][0] for s in a}
    own_b = {s: lineage_b[s][0] for s in b}
    up_a = {s: lineage_a[s][1] for s in a}
    up_b = {s: lineage_b[s][1] for s in b}
    if not all(own_a.values()) or not all(own_b.values()):
        return None
    if set(own_a.values()) & set(own_b.values()):  # one run's rows: its eval-time variants
        return _by_key(a, own_a, b, own_b, "run by run")
    if all(up_a.values()) and all(up_b.values()) and set(up_a.values()) & set(up_b.values()):
        # siblings: children of one parent pair by their own seed
        seeded_a = {s: (up_a[s], s) for s in a}
        seeded_b = {s: (up_b[s], s) for s in b}
        if set(seeded_a.values()) & set(seeded_b.values()):
            return _by_key(a, seeded_a, b, seeded_b, "by parent and seed")
        return _by_key(a, up_a, b, up_b, "by parent")  # no seed in common: each parent's mean
    if all(up_a.values()) and set(up_a.values()) & set(own_b.values()):
        return _child_with_parent(a, up_a, b, own_b, children_left=True)
    if all(up_b.values()) and set(up_b.values()) & set(own_a.values()):
        return _child_with_parent(b, up_b, a, own_a, children_left=False)
    return None
