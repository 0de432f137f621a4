"""Claims paired by lineage: an extension at seed s starts from its parent at seed s, so a
comparison between runs that share a parent, or between a run and its parent, pairs each
parent's runs with each other (``k/n`` counts the parents); two eval-time variants of the same
runs (``rope`` and ``rope+yarn×4``: one model per seed) pair run by run. Runs of unrelated
lines stay independent: every seed of one against every seed of the other.

A run's lineage is two keys: its own (``run name|fingerprint`` as its ``run.json`` records it)
and its parent's (an extension's ``run.json`` ``parent``: the same two words; ``""`` for a run
trained from scratch).
"""

from __future__ import annotations

from collections.abc import Mapping
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


def _mean_by(values: Mapping[int, float], key: Mapping[int, str]) -> dict[str, float]:
    groups: dict[str, list[float]] = {}
    for seed, value in values.items():
        groups.setdefault(key[seed], []).append(value)
    return {k: sum(v) / len(v) for k, v in groups.items()}


def paired_by_parent(
    a: Mapping[int, float],
    lineage_a: Mapping[int, tuple[str, str]],
    b: Mapping[int, float],
    lineage_b: Mapping[int, tuple[str, str]],
) -> list[tuple[float, float]] | None:
    """The pairs of a comparison between two related terms, one per parent they share (the
    mean of a parent's runs where it has several); None when the terms are unrelated (or a
    run's lineage is unknown), to be compared seed against seed.

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
    if all(own_a.values()) and set(own_a.values()) == set(own_b.values()):
        left, right = _mean_by(a, own_a), _mean_by(b, own_b)  # one run's eval-time variants
    elif all(up_a.values()) and all(up_b.values()) and set(up_a.values()) & set(up_b.values()):
        left, right = _mean_by(a, up_a), _mean_by(b, up_b)  # siblings: by their parent
    elif all(up_a.values()) and set(up_a.values()) <= set(own_b.values()):
        left, right = _mean_by(a, up_a), _mean_by(b, own_b)  # a extends b
    elif all(up_b.values()) and set(up_b.values()) <= set(own_a.values()):
        left, right = _mean_by(a, own_a), _mean_by(b, up_b)  # b extends a
    else:
        return None
    return [(left[k], right[k]) for k in sorted(set(left) & set(right))]
