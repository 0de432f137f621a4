"""Row labels and the notes that say which settings the rows of a table differ in.

A row is a variant (an encoding, maybe with eval-time overrides) plus the ``--by`` values. Runs
with the same label but different configurations (``rope`` trained for 300 and for 1000 steps)
are never merged: their labels name the keys that differ (``rope · train.steps=300``), and so do
their eval-time variants' (``rope+yarn×4 · train.steps=300``), even when only one of them was
evaluated with the variant; the table gets a remark listing every setting its rows differ in
that the user did not group by.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from posx.errors import ConfigError
from posx.report.configs import (
    BY_ALIASES,
    EXPLAINED_BY,
    MAX_LABEL_KEYS,
    MAX_REMARK_KEYS,
    PREFIX,
    config_column,
    config_keys,
    effective,
    show,
)
from posx.report.data import BY_CHOICES, IDENTITY
from posx.report.protocols import add_protocol

BY_LABELS = {"train_length": "L_train", "model": "model", "task": "task", "mode": "mode"}
# An extension's label says what was done to its parent (rope+yarn×4+ft@256, posx extend), so
# its extend.* settings are accounted for by the encoding column like encoding.* ones.
LABEL_EXPLAINS = {"encoding": ("extend.",)}
Remarks = dict[tuple, list[str]]


def parse_by(values: Sequence[str] | None, frame: pd.DataFrame | None = None) -> list[str]:
    """``--by`` keys: an identity column (task, model, train_length, mode, seed) or, given the
    loaded rows, any config key (``train.steps``); repeated or comma-separated."""
    keys = [v.strip() for text in values or [] for v in text.split(",") if v.strip()]
    known = set(config_keys(frame)) if frame is not None else set()
    out = []
    for key in keys:
        key = BY_ALIASES.get(key, key)
        if key not in BY_CHOICES and key not in known:
            raise ConfigError(
                f"unknown --by {key!r}; choose from {', '.join(BY_CHOICES)} or a config key "
                "such as train.steps or model.d_model"
            )
        out.append(key)
    return list(dict.fromkeys(out))


def table_keys(by: Sequence[str]) -> list[str]:
    """The identity columns that split rows into separate tables."""
    return [k for k in IDENTITY if k not in by]


def _by_text(frame: pd.DataFrame, key: str) -> pd.Series:
    if key in BY_CHOICES:
        name = BY_LABELS.get(key, key)
        return frame[key].map(lambda v: f"{name}={v}")
    return effective(frame, key).map(lambda v: f"{key}={show(v)}")


def _differing(idents: pd.DataFrame) -> list[str]:
    """Keys whose values differ between the rows (configurations) of ``idents``."""
    if len(idents) < 2:
        return []
    shown = idents.map(show)
    return [k for k in shown.columns if shown[k].nunique() > 1]


def _explained(key: str, runs: pd.DataFrame) -> bool:
    """Whether a column the table already shows (encoding, task, ...) accounts for ``key``."""
    for col, prefixes in EXPLAINED_BY.items():
        if (
            col in runs
            and key.startswith((*prefixes, *LABEL_EXPLAINS.get(col, ())))
            and (runs.groupby(col)[key].nunique(dropna=False) <= 1).all()
        ):
            return True
    return False


def _remark(keys: list[str], runs: pd.DataFrame) -> str:
    parts = []
    for key in keys[:MAX_REMARK_KEYS]:
        values = sorted({show(v) for v in runs[key]}, key=_natural)
        parts.append(f"{key} ({', '.join(values[:4])}{', …' if len(values) > 4 else ''})")
    more = f" and {len(keys) - MAX_REMARK_KEYS} more" if len(keys) > MAX_REMARK_KEYS else ""
    return (
        f"rows differ in settings not grouped by: {'; '.join(parts)}{more}. "
        "Compare like with like: --by KEY, or --where KEY=VALUE"
    )


def _natural(text: str) -> tuple[int, float, str]:
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)


def _with_protocol(frame: pd.DataFrame, base: pd.Series, by: Sequence[str]) -> pd.Series:
    """Appends the evaluation (``window=W stride=S``, ``data.add_protocol``) to sliding-mode
    rows whose label has several: one sliding evaluation of a run stays one row, whatever
    protocol each of its lengths resolved to."""
    proto = frame["protocol"].astype(str)
    sliding = proto != ""  # only sliding rows have one
    if not sliding.any():
        return base
    group = [frame[k] for k in table_keys(by)] + [base]
    several = proto.where(sliding).groupby(group, dropna=False).transform("nunique") > 1
    return base.where(~(sliding & several), base + " · " + proto)


def label_rows(frame: pd.DataFrame, by: Sequence[str] = ()) -> tuple[pd.DataFrame, Remarks]:
    """Adds ``label`` (unique per configuration within a table) and returns the remarks.

    Args:
        frame: Eval (or position) rows with ``variant`` and, where known, ``fingerprint`` and
            ``config:<key>`` columns (``configs.attach_configs``). Rows without ``protocol``
            get it (``data.add_protocol``: a sliding row whose one window covers its length is
            repeated for each evaluation of its run it belongs to).
        by: Keys from :func:`parse_by`.

    Returns:
        The rows with ``protocol`` and ``label``, and per table (a tuple of its
        :func:`table_keys` values) the remarks to print under it.
    """
    # rows are addressed by index below (add_protocol resets it too)
    frame = add_protocol(frame) if "protocol" not in frame else frame.reset_index(drop=True)
    base = frame["variant"].astype(str)
    for key in by:
        base = base + " · " + _by_text(frame, key)
    base = _with_protocol(frame, base, by)
    frame["label"] = base
    # A variant (rope+yarn×4) belongs to its run's configuration: its encoding's rows are told
    # apart together, so the variant names the same keys as its base row (train.steps=300).
    family = frame["encoding"].astype(str) + pd.Series(
        [b[len(v) :] for b, v in zip(base, frame["variant"].astype(str), strict=True)],
        index=frame.index,
    )
    if "fingerprint" not in frame:
        return frame, {}
    cols = [c for c in frame.columns if c.startswith(PREFIX)]
    keys = table_keys(by)
    remarks: Remarks = {}
    groups = frame.groupby(keys, sort=False, dropna=False) if keys else [((), frame)]
    for key, part in groups:
        key = key if isinstance(key, tuple) else (key,)
        known = part[part["fingerprint"] != ""]
        idents = known.drop_duplicates("fingerprint").set_index("fingerprint")[cols]
        idents.columns = [c.removeprefix(PREFIX) for c in cols]
        for _, same in part.groupby(family.loc[part.index], sort=False):
            prints = list(dict.fromkeys(same["fingerprint"]))
            if len(prints) < 2:
                continue
            differ = [k for k in _differing(idents.loc[[p for p in prints if p]]) if k not in by]
            for fp in prints:
                if not fp:
                    suffix = "no saved config"
                else:
                    shown = [f"{k}={show(idents.at[fp, k])}" for k in differ[:MAX_LABEL_KEYS]]
                    if len(differ) > MAX_LABEL_KEYS or not shown:
                        shown.append(f"config {fp[:6]}")
                    suffix = " · ".join(shown)
                rows = same.index[same["fingerprint"] == fp]
                frame.loc[rows, "label"] = frame.loc[rows, "label"] + " · " + suffix
        explain = [c for c in EXPLAINED_BY if c in known]
        runs = known.drop_duplicates(["fingerprint", *explain])[["fingerprint", *explain, *cols]]
        runs.columns = [c.removeprefix(PREFIX) for c in runs.columns]
        differ = [
            k
            for k in _differing(idents)
            if k not in by and config_column(k) not in by and not _explained(k, runs)
        ]
        if differ:
            remarks[key] = [_remark(differ, runs)]
    return frame, remarks
