"""Eval rows -> summaries: mean ± std over seeds, n, degradation ratio, best per column.

``summarize`` makes the long table (one row per table key, row label and eval length);
``pivot`` turns it into ``WideTable`` objects (rows = variants, columns = eval lengths) that
every exporter renders the same way. A row is one configuration (``labels.label_rows``): runs
that differ in config are never averaged, and ``n`` counts distinct seeds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from posx.errors import PosxError
from posx.report.chance import (
    LEARNED,
    NOT_LEARNED,
    above_chance,
    learned_rows,
    seeds_not_learned,
)
from posx.report.data import IDENTITY, lower_is_better, metric_by_task, normalize
from posx.report.labels import Remarks, label_rows, table_keys
from posx.report.protocols import add_ratio
from posx.report.units import fixed, metric_label


def row_keys(by: Sequence[str]) -> list[str]:
    """Columns that tell the summary's rows apart (seed only when asked for)."""
    seed = ["seed"] if "seed" in by else []
    return [*IDENTITY, "label", "variant", "encoding", "overrides", "fingerprint", *seed]


def summarize(
    frame: pd.DataFrame,
    metric: str = "auto",
    by: Sequence[str] = (),
    learned: float = LEARNED,
    learned_loss: float | None = None,
) -> pd.DataFrame:
    """Long table: mean, std (ddof 1) and n over seeds per (identity, variant, eval length).

    Exact match of a task with a chance level is shown above chance, and rows that did not
    learn their task at the training length are marked (:mod:`posx.report.chance`).

    Args:
        frame: Eval rows (``load_evals``); normalised here when needed.
        metric: A metric column or ``auto`` (picked per task, see ``metric_by_task``).
        by: Columns shown side by side in one table (decides which cells compete for best).
        learned: Least value at the training length of an accuracy-like metric (above chance)
            for a row to count as learned; 0 = every row.
        learned_loss: Most value at the training length of a lower-is-better metric; None =
            every row.

    Returns:
        One row per cell with ``label``, ``metric``, ``mean``, ``std``, ``n`` (distinct seeds
        with a value), ``ratio_mean``/``ratio_std`` (the metric relative to the same run at its
        training length), ``status``/``reason`` (``ok``, or why no seed has a value),
        ``margin`` (how far above chance a mean may lie and still be at chance), ``learned``
        (the row's mean at its training length), ``seeds_not_learned`` (how many of its seeds
        did not learn, each judged on its own value there) and ``best`` (best of the column
        among learned rows).

    Raises:
        PosxError: When one seed of one configuration has two values for a cell (duplicate
            runs; ``configs.drop_duplicate_runs`` keeps one).
    """
    frame = frame.reset_index(drop=True)
    if "variant" not in frame:
        frame = normalize(frame)
    if "fingerprint" not in frame:
        frame = frame.assign(fingerprint="")
    if "label" not in frame:
        frame, _ = label_rows(frame, by)
    metrics = metric_by_task(frame, metric)
    frame = frame.assign(metric=frame["task"].map(metrics), value=math.nan)
    for name in set(metrics.values()) & set(frame.columns):
        where = frame["metric"] == name
        frame.loc[where, "value"] = frame.loc[where, name].astype(float)
    frame = above_chance(frame)
    frame = add_ratio(frame, "value")  # ×r is a ratio of the metric the table shows
    keys = [*row_keys(by), "metric", "eval_length"]
    ok = frame[(frame["status"] == "ok") & frame["value"].notna()]
    twice = ok[ok.duplicated([*keys, "seed"], keep=False)]
    if len(twice):
        runs = sorted(set(twice["run_dir"]))
        raise PosxError(
            f"seed {twice['seed'].iloc[0]} of one configuration has two values for "
            f"{twice['label'].iloc[0]} at L={twice['eval_length'].iloc[0]} (runs "
            f"{', '.join(runs[:2])}); keep one run (make_report drops the older duplicate)"
        )
    stats = ok.groupby(keys, dropna=False).agg(
        mean=("value", "mean"),
        std=("value", "std"),
        n=("seed", "nunique"),
        ratio_mean=("ratio", "mean"),
        ratio_std=("ratio", "std"),
        margin=("margin", "mean"),
    )
    bad = (
        frame[frame["status"] != "ok"]
        .groupby(keys, dropna=False)
        .agg(status=("status", "first"), reason=("reason", "first"))
    )
    out = stats.join(bad, how="outer").reset_index()
    out["n"] = out["n"].fillna(0).astype(int)
    out.loc[out["n"] > 0, ["status", "reason"]] = ["ok", ""]
    out["status"] = out["status"].fillna("ok")
    out["reason"] = out["reason"].fillna("")
    out["margin"] = out["margin"].fillna(0.0)
    out["learned"] = learned_rows(out, row_keys(by), learned, learned_loss)
    out["seeds_not_learned"] = seeds_not_learned(ok, out, row_keys(by), learned, learned_loss)
    out["best"] = _best(out, by)
    return out.sort_values(keys).reset_index(drop=True)


# Units whose lengths are sequence positions, headed ``L=64``; other units (digits) name themselves.
SEQUENCE_UNITS = ("tokens", "bytes")


def length_unit(meta: dict[str, Any]) -> str:
    """The unit of a table's lengths: ``tokens`` unless its rows say otherwise."""
    return str(meta.get("length_unit") or "tokens")


def sequence_unit(unit: str) -> str | None:
    """``tokens`` or ``bytes`` where lengths in ``unit`` are sequence positions (a pretrained
    model's ``tokens (tokenizer ...)`` too), else None (``digits``)."""
    head = unit.split(" ", 1)[0]
    return head if head in SEQUENCE_UNITS else None


def length_header(meta: dict[str, Any], length: int) -> str:
    """A length column's header: ``L=64`` for tokens and bytes (the title names which),
    ``5 digits`` for digits."""
    unit = length_unit(meta)
    return f"L={length}" if sequence_unit(unit) else f"{length} {unit}"


def tex_length(meta: dict[str, Any], length: int) -> str:
    """:func:`length_header` for LaTeX: ``$L=64$``, ``5 digits``."""
    header = length_header(meta, length)
    return f"${header}$" if sequence_unit(length_unit(meta)) else header


def _best(out: pd.DataFrame, by: Sequence[str]) -> pd.Series:
    """True where a cell has the best mean of its column among learned rows (ties all marked;
    >= 2 contenders)."""
    best = pd.Series(False, index=out.index)
    for _, col in out[(out["n"] > 0) & out["learned"]].groupby([*table_keys(by), "eval_length"]):
        if len(col) < 2:
            continue
        top = col["mean"].min() if lower_is_better(col["metric"].iloc[0]) else col["mean"].max()
        best[col.index[col["mean"] == top]] = True
    return best


@dataclass
class Cell:
    """One table cell: statistics over seeds, or why there are none."""

    mean: float = math.nan
    std: float = math.nan
    n: int = 0
    ratio: float = math.nan
    ratio_std: float = math.nan
    status: str = "missing"
    reason: str = ""
    best: bool = False
    note: int = 0  # 1-based index into WideTable.notes; 0 = no note
    margin: float = 0.0  # a mean up to this far above chance is at chance (chance.above_chance)


@dataclass
class WideTable:
    """Variants x eval lengths for one (task, model, train length, mode) minus ``--by``."""

    meta: dict[str, Any]
    lengths: list[int]
    rows: list[str]
    encodings: dict[str, str]
    train_lengths: dict[str, int]
    n: dict[str, int]
    cells: dict[tuple[str, int], Cell]
    notes: list[str] = field(default_factory=list)
    remarks: list[str] = field(default_factory=list)  # unnumbered lines under the table
    not_learned: set[str] = field(default_factory=set)  # rows below --learned at training length
    # learned rows with some seeds below --learned at the training length: (those seeds, n)
    seeds_not_learned: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def metric(self) -> str:
        return str(self.meta["metric"])

    def cell(self, row: str, length: int) -> Cell:
        return self.cells.get((row, length), Cell())


@dataclass
class Section:
    """A plain table another part of posx adds to a report (the claims' verdicts): every
    exporter shows it after the ranking, with its notes under it."""

    title: str
    header: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)


def pivot(
    summary: pd.DataFrame, by: Sequence[str] = (), remarks: Remarks | None = None
) -> list[WideTable]:
    """One ``WideTable`` per table key; unsupported/failed cells get numbered notes.

    Args:
        summary: ``summarize``'s long table.
        by: The ``--by`` keys it was summarised with.
        remarks: Lines to print under each table, by table key (``labels.label_rows``).
    """
    keys = table_keys(by)
    tables = []
    groups = summary.groupby(keys, sort=True) if keys else [((), summary)]
    for key, part in groups:
        key = key if isinstance(key, tuple) else (key,)
        metrics = sorted(part["metric"].unique())
        meta: dict[str, Any] = dict(zip(keys, key, strict=True))
        meta["metric"] = metrics[0] if len(metrics) == 1 else "/".join(metrics)
        meta["by"] = list(by)
        table = WideTable(
            meta, sorted(int(x) for x in part["eval_length"].unique()), [], {}, {}, {}, {}
        )
        notes: dict[str, int] = {}
        for rec in part.itertuples():
            label = str(rec.label)
            if label not in table.encodings:
                table.rows.append(label)
                table.encodings[label] = str(rec.encoding)
                table.train_lengths[label] = int(rec.train_length)
            table.n[label] = max(table.n.get(label, 0), int(rec.n))
            if not rec.learned:
                table.not_learned.add(label)
            elif getattr(rec, "seeds_not_learned", 0) and rec.eval_length == rec.train_length:
                table.seeds_not_learned[label] = (int(rec.seeds_not_learned), int(rec.n))
            cell = Cell(
                rec.mean, rec.std, int(rec.n), rec.ratio_mean, rec.ratio_std,
                rec.status, rec.reason, bool(rec.best), margin=float(rec.margin),
            )  # fmt: skip
            if cell.n == 0:
                text = f"{cell.status}: {cell.reason}" if cell.reason else cell.status
                cell.note = notes.setdefault(text, len(notes) + 1)
            table.cells[(label, int(rec.eval_length))] = cell
        table.notes = list(notes)
        table.remarks = list((remarks or {}).get(key, []))
        tables.append(table)
    return tables


def learned_mark(table: WideTable, row: str) -> str:
    """What a row's label says about learning: ``not learned`` (its mean at the training length
    is below ``--learned``), ``1 of 3 seeds not learned`` (some seeds are), or nothing."""
    if row in table.not_learned:
        return NOT_LEARNED
    if row in table.seeds_not_learned:
        failed, n = table.seeds_not_learned[row]
        return f"{failed} of {n} seeds {NOT_LEARNED}"
    return ""


def row_label(table: WideTable, row: str) -> str:
    """The row's label as tables show it: ``nope (not learned)`` when it did not learn,
    ``nope (1 of 3 seeds not learned)`` when some of its seeds did not."""
    mark = learned_mark(table, row)
    return f"{row} ({mark})" if mark else row


def title(meta: dict[str, Any]) -> str:
    """One line naming what a table compares, e.g. ``copy · model tiny · trained at 16 ...``."""
    parts = []
    if "task" in meta:
        parts.append(str(meta["task"]))
    if "model" in meta:
        parts.append(f"model {meta['model']}")
    if "train_length" in meta:
        parts.append(f"trained at {meta['train_length']} {length_unit(meta)}")
    else:  # rows of several training lengths: the columns' unit still needs saying
        parts.append(f"lengths in {length_unit(meta)}")
    if "mode" in meta:
        parts.append(f"mode {meta['mode']}")
    metric = str(meta["metric"])
    arrow = "lower is better" if lower_is_better(metric.split("/")[0]) else "higher is better"
    parts.append(f"{metric_label(metric)}, {arrow}")
    return " · ".join(parts)


def fmt_value(cell: Cell, digits: int = 3) -> str:
    """``mean ± std`` (std only with two or more seeds); the status when there is no value."""
    if cell.n == 0:
        return "—" if cell.status == "missing" else cell.status
    if cell.n == 1 or math.isnan(cell.std):
        return fixed(cell.mean, digits)
    return f"{fixed(cell.mean, digits)} ± {fixed(cell.std, digits)}"


def fmt_ratio(cell: Cell, length: int, train_length: int) -> str:
    """``×1.52`` (the table's metric relative to the same run at its training length), empty at
    the training length itself."""
    if cell.n == 0 or math.isnan(cell.ratio) or length == train_length:
        return ""
    return f"×{fixed(cell.ratio, 2)}"


def cell_parts(table: WideTable, row: str, length: int, digits: int, ratio: bool) -> tuple:
    """(value text, ratio text, n text, note number) of one cell, shared by every exporter.

    The n text is set when the cell has fewer seeds than its row, so a partial mean is visible.
    """
    cell = table.cell(row, length)
    extra = fmt_ratio(cell, length, table.train_lengths[row]) if ratio else ""
    fewer = f"n={cell.n}" if 0 < cell.n < table.n[row] else ""
    return fmt_value(cell, digits), extra, fewer, cell.note
