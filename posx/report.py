"""Turns eval rows into comparison tables: encodings x eval lengths, mean ± std over seeds."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
from rich.markup import escape
from rich.table import Table

from posx.errors import ConfigError

LOWER_IS_BETTER = {"loss": True, "ppl": True, "bpb": True, "acc": False, "exact_match": False}
METRICS = tuple(LOWER_IS_BETTER)
GROUP = ["task", "train_length", "model", "mode"]


def pick_metric(df: pd.DataFrame, metric: str) -> str:
    """``auto``: bits per byte for text, exact match for synthetic tasks, else loss."""
    if metric != "auto":
        if metric not in METRICS:
            raise ConfigError(f"unknown metric {metric!r}; choose from auto, {', '.join(METRICS)}")
        return metric
    for candidate in ("bpb", "exact_match"):
        if candidate in df and df[candidate].notna().any():
            return candidate
    return "loss"


def label(row: pd.Series) -> str:
    """Encoding name plus its eval-time overrides, so variants never merge silently."""
    extra = row.get("overrides", "")
    return (
        f"{row['encoding']} [{extra}]" if isinstance(extra, str) and extra else str(row["encoding"])
    )


def summarize(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Long table: one row per (group, variant, eval length) with mean, std, n and status.

    ``n`` counts seeds with a value; a cell with none carries the status and reason of its rows
    (``unsupported``, ``failed``) instead of a number.
    """
    df = df.copy()
    df["variant"] = df.apply(label, axis=1) if len(df) else []
    ok = df[df["status"] == "ok"]
    keys = [*GROUP, "variant", "eval_length"]
    stats = ok.groupby(keys)[metric].agg(mean="mean", std="std", n="count").reset_index()
    bad = (
        df[df["status"] != "ok"]
        .groupby(keys)
        .agg(status=("status", "first"), reason=("reason", "first"))
    )
    out = stats.merge(bad.reset_index(), on=keys, how="outer")
    out["status"] = out["status"].fillna("ok")
    out["reason"] = out["reason"].fillna("")
    out["n"] = out["n"].fillna(0).astype(int)
    out.insert(len(GROUP) + 2, "metric", metric)
    return out.sort_values(keys).reset_index(drop=True)


def cell_text(mean: float, std: float, n: int, status: str) -> str:
    if n == 0:
        return status
    return f"{mean:.3f}" if n == 1 or math.isnan(std) else f"{mean:.3f} ± {std:.3f}"


def pivot(summary: pd.DataFrame) -> list[tuple[dict[str, Any], pd.DataFrame, set[tuple[str, int]]]]:
    """One wide table per group: rows variants, columns eval lengths, plus the best cells."""
    tables = []
    for key, part in summary.groupby(GROUP, sort=True):
        metric = part["metric"].iloc[0]
        lengths = sorted(part["eval_length"].unique())
        wide = pd.DataFrame(
            index=sorted(part["variant"].unique()), columns=[str(x) for x in lengths]
        )
        for r in part.itertuples():
            wide.loc[r.variant, str(r.eval_length)] = cell_text(r.mean, r.std, r.n, r.status)
        wide.insert(0, "n", part.groupby("variant")["n"].max().reindex(wide.index).astype(int))
        best = set()
        for length, col in part[part["n"] > 0].groupby("eval_length"):
            top = col["mean"].min() if LOWER_IS_BETTER[metric] else col["mean"].max()
            best |= {(v, int(length)) for v in col.loc[col["mean"] == top, "variant"]}
        tables.append((dict(zip(GROUP, key, strict=True), metric=metric), wide, best))
    return tables


def title(meta: dict[str, Any]) -> str:
    arrow = "lower is better" if LOWER_IS_BETTER[meta["metric"]] else "higher is better"
    return (
        f"{meta['task']} · model {meta['model']} · trained at {meta['train_length']} · "
        f"mode {meta['mode']} · {meta['metric']} ({arrow})"
    )


def to_rich(tables: list) -> list[Table]:
    out = []
    for meta, wide, best in tables:
        table = Table(title=title(meta), title_justify="left")
        table.add_column("encoding", style="bold")
        for col in wide.columns:
            table.add_column(col if col == "n" else f"L={col}", justify="right")
        for variant, row in wide.iterrows():
            cells = [str(row["n"])]
            for col in wide.columns[1:]:
                text = str(row[col]) if isinstance(row[col], str) else "—"
                if (variant, int(col)) in best:
                    text = f"[bold green]{text}[/]"
                elif text in ("unsupported", "failed"):
                    text = f"[dim]{text}[/]"
                cells.append(text)
            table.add_row(escape(str(variant)), *cells)
        out.append(table)
    return out


def to_markdown(tables: list) -> str:
    parts = []
    for meta, wide, best in tables:
        header = ["encoding", "n", *(f"L={c}" for c in wide.columns[1:])]
        lines = [
            f"**{title(meta)}**",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
        ]
        for variant, row in wide.iterrows():
            cells = [str(variant), str(row["n"])]
            for col in wide.columns[1:]:
                text = str(row[col]) if isinstance(row[col], str) else "—"
                cells.append(f"**{text}**" if (variant, int(col)) in best else text)
            lines.append("| " + " | ".join(cells) + " |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"
