"""What the plots draw, in the tables' terms: row labels, the tables' metric per position, and
each position bucket's band for the noise (``bucket_stats``).

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
    # as text whatever pandas infers (an empty frame's mapped column is int64, not text)
    parts += [frame[c].map(show).astype(str) if c in frame else pd.Series("", index=frame.index)
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


Z = 2.0  # a band's half-width in standard errors (about 95% for a mean of many tokens or seeds)


def wilson(p: pd.Series, n: pd.Series, z: float = Z) -> tuple[pd.Series, pd.Series]:
    """The Wilson score interval of fractions ``p`` of ``n`` trials: unlike ± z standard errors
    it stays inside [0, 1] and does not shrink to nothing at 0 or 1 with few trials."""
    denom = 1 + z**2 / n
    centre = (p + z**2 / (2 * n)) / denom
    half = z * ((p * (1 - p) / n + z**2 / (4 * n**2)) ** 0.5) / denom
    return centre - half, centre + half


def bucket_stats(runs: pd.DataFrame) -> pd.DataFrame:
    """One row's buckets with their mean over the row's runs and a band for the noise.

    Columns: ``bucket_start``, ``bucket_end``, ``mid``, ``mean``, ``std``, ``runs``, ``tokens``
    (scored tokens per run) and the band ``low``..``high`` of kind ``band``:

    - ``seeds``: several runs: the mean ± 2 standard errors over the runs;
    - ``tokens``: one run's token accuracy: the Wilson interval (z = 2) from the bucket's
      scored tokens, taken as independent (tokens of one sequence are not, so the noise is at
      least this);
    - ``none``: one run's loss, bits per byte or perplexity: ``eval_positions.csv`` records
      each bucket's mean and token count, not the spread of its tokens' losses, so no band.
    """
    group = runs.groupby(["bucket_start", "bucket_end"])
    stats = group["value"].agg(["mean", "std", "count"])
    stats["tokens"] = group["tokens"].mean() if "tokens" in runs else math.nan
    stats = stats.reset_index().sort_values("bucket_start", ignore_index=True)
    stats["mid"] = (stats["bucket_start"] + stats["bucket_end"]) / 2
    stats = stats.rename(columns={"count": "runs"})
    half = Z * stats["std"] / stats["runs"].pow(0.5)
    several = stats["runs"] > 1
    stats["low"] = (stats["mean"] - half).where(several)
    stats["high"] = (stats["mean"] + half).where(several)
    stats["band"] = several.map({True: "seeds", False: "none"})
    if (runs["metric"] == "acc").all():
        low, high = wilson(stats["mean"], stats["tokens"])
        one = ~several & stats["tokens"].gt(0)
        stats.loc[one, "low"], stats.loc[one, "high"] = low[one], high[one]
        stats.loc[one, "band"] = "tokens"
    return stats
