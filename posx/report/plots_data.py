"""What the plots draw, in the tables' terms: row labels and the tables' metric per position.

``eval_positions.csv`` records loss (nats/token) and token accuracy per position bucket. A plot
under a table in bits per byte shows bits per byte per position (the loss times the run's own
bits-per-byte factor), one in perplexity shows ``e^loss``; a table in exact match, which has no
per-position value, gets token accuracy per position, and the plot says so.
"""

from __future__ import annotations

import math

import pandas as pd

from posx.report.configs import show

# Per-position stand-ins for metrics that exist per sequence only.
PER_POSITION = {"loss": "loss", "bpb": "bpb", "ppl": "ppl", "acc": "acc"}


def _row_key(frame: pd.DataFrame) -> pd.Series:
    """One string per (run, overrides, mode, length, window, stride): an eval row's identity."""
    parts = [frame[c].astype(str) for c in ("run_dir", "overrides", "mode", "eval_length")]
    parts += [frame[c].map(show) if c in frame else pd.Series("", index=frame.index)
              for c in ("window", "stride")]  # fmt: skip
    key = parts[0]
    for p in parts[1:]:
        key = key + "|" + p
    return key


def run_labels(evals: pd.DataFrame) -> dict[str, str]:
    """Each run's row label: that of its plain rows (mode full, no overrides) if any."""
    plain = (evals["overrides"] == "") & (evals["mode"] == "full")
    ordered = pd.concat([evals[plain], evals[~plain]])
    return ordered.drop_duplicates("run_dir").set_index("run_dir")["label"].to_dict()


def plotted_metric(table_metric: str) -> str:
    """The per-position metric drawn under a table in ``table_metric``."""
    if table_metric in PER_POSITION:
        return PER_POSITION[table_metric]
    return "acc" if table_metric.startswith(("acc", "exact")) else "loss"


def position_values(
    positions: pd.DataFrame, evals: pd.DataFrame, metrics: dict[str, str]
) -> pd.DataFrame:
    """Adds ``label``, ``table_metric``, ``metric`` (what is drawn) and ``value`` per bucket.

    Args:
        positions: ``eval_positions.csv`` rows (with ``loss`` and ``acc``).
        evals: The labelled eval rows of the report (``labels.label_rows``).
        metrics: Task -> the metric its table shows.
    """
    ekey = _row_key(evals)
    # One eval row can belong to several rows of a table (a sliding row whose one window covers
    # its length, data.add_protocol): its buckets are drawn under each of them.
    labels = pd.DataFrame({"_key": ekey, "label": evals["label"]}).drop_duplicates()
    positions = positions.drop(columns="label", errors="ignore").reset_index(drop=True)
    positions = positions.assign(_key=_row_key(positions)).merge(labels, "left", on="_key")
    key = positions.pop("_key")
    positions["label"] = positions["label"].fillna(positions["variant"])
    table = positions["task"].map(metrics).fillna("loss")
    positions["table_metric"] = table
    positions["metric"] = table.map(plotted_metric)
    positions["value"] = math.nan
    loss = positions["loss"].astype(float)
    for name, values in (("loss", loss), ("ppl", loss.clip(upper=80.0).map(math.exp))):
        where = positions["metric"] == name
        positions.loc[where, "value"] = values[where]
    if "acc" in positions:
        where = positions["metric"] == "acc"
        positions.loc[where, "value"] = positions.loc[where, "acc"].astype(float)
    bpb = positions["metric"] == "bpb"
    if bpb.any() and "bpb" in evals:
        factor = (evals["bpb"].astype(float) / evals["loss"].astype(float)).to_numpy()
        factors = pd.Series(factor, index=ekey).groupby(level=0).first()
        positions.loc[bpb, "value"] = loss[bpb] * key[bpb].map(factors)
    return positions
