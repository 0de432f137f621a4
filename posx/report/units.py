"""The unit of every number posx prints, and the metric a task is shown in.

``posx report`` picks one metric per task (``auto``: bits per byte for text, exact match for
synthetic tasks, else loss); ``posx eval`` prints the same metric for the same row, so a number
reads the same in both places, and each names its unit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# The metric `auto` shows: the first of these a row records, else loss.
AUTO_METRICS = ("bpb", "score", "exact_match")
UNITS = {
    "loss": "nats/token",
    "bpb": "bits/byte",
    "ppl": "perplexity, e^loss",
    "acc": "fraction of scored tokens",
    "exact_match": "fraction of sequences",
    "score": "percent, RULER's string_match_all",
    "exact_match_above_chance": "(exact match − chance) / (1 − chance); 0 = chance, 1 = all",
    "seconds": "s",
    "tokens_per_s": "tokens/s",
    "forward_tokens": "tokens",
    "peak_mem_mb": "MiB",
    "mem_delta_mb": "MiB",
}
NAMES = {"loss": "loss", "bpb": "bits per byte", "ppl": "perplexity", "acc": "token accuracy",
         "exact_match": "exact match", "score": "RULER score",
         "exact_match_above_chance": "exact match above chance"}  # fmt: skip


def unit(metric: str) -> str:
    """The unit of a metric column (``nats/token``); accuracies by prefix; else as recorded."""
    if metric in UNITS:
        return UNITS[metric]
    if metric.startswith(("acc", "exact")):
        return "fraction"
    return "as recorded in eval.csv"


def metric_label(metric: str) -> str:
    """``loss [nats/token]``, ``exact_match [fraction of sequences]``; ``a/b`` for mixed tables."""
    return " / ".join(f"{m} [{unit(m)}]" for m in metric.split("/"))


def auto_metric(row: Mapping[str, Any]) -> str:
    """The metric ``posx report --metric auto`` shows for an eval row (a dict of its columns)."""
    for name in AUTO_METRICS:
        value = row.get(name)
        if isinstance(value, int | float) and not math.isnan(value):
            return name
    return "loss"


def fixed(value: float, digits: int) -> str:
    """``value`` with ``digits`` decimals, never ``-0.000``: a value that rounds to zero has no
    sign (a mean of -0.0, or -1e-9 from a float sum, is zero to the reader)."""
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def format_metric(metric: str, value: float, digits: int = 3) -> str:
    """``1.234 bits/byte``, ``0.870 exact_match (fraction of sequences)``."""
    text = fixed(value, digits)
    if metric in ("loss", "bpb"):
        return f"{text} {unit(metric)}"
    return f"{text} {metric} ({unit(metric)})"


def eval_summary(row: Mapping[str, Any], digits: int = 3) -> str:
    """One eval row as ``posx eval`` prints it: ``L=1024: 1.234 bits/byte`` or its status."""
    head = f"L={row['eval_length']}"
    if row.get("status", "ok") != "ok":
        return f"{head}: {row['status']}"
    metric = auto_metric(row)
    return f"{head}: {format_metric(metric, float(row[metric]), digits)}"
