"""The tracker contract and what every tracker receives: the run's identity and config, its
training curve, its eval rows.

A tracker (one per backend: :mod:`~posx.tracking.tensorboard`, :mod:`~posx.tracking.wandb`,
:mod:`~posx.tracking.mlflow`) opens one run in its tool, or reopens the one recorded in the run
directory's ``trackers.json`` (``posx resume``, ``posx eval`` later), and logs:

- the config, once, when the run is first opened;
- every ``metrics.csv`` row as ``train/loss``, ``train/lr``, ``train/tokens_per_s``,
  ``train/grad_norm`` at its step;
- every eval row as ``eval/<variant>/<metric>`` at step = eval length (variant = the short label,
  ``rope`` or ``rope+yarn×4``, plus the protocol when not ``full``).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posx.config.variant_names import short_label

TRAIN_KEYS = ("loss", "lr", "tokens_per_s", "grad_norm")
EVAL_METRICS = ("loss", "ppl", "bpb", "acc", "exact_match", "tokens_per_s", "seconds",
                "peak_mem_mb")  # fmt: skip


@dataclass
class RunRef:
    """What a tracker needs to know about the run it records.

    Attributes:
        run_dir: The run directory.
        name: The run's name (its directory name).
        root: The results root.
        config: The resolved config, nested.
        flat: The same config as ``{"train.steps": 1000, ...}``.
        tags: Identity (encoding, task, model, seed, train_length, fingerprint, run_dir).
        sweep_dir: The sweep's directory when the run is one job of a sweep, else None.
    """

    run_dir: Path
    name: str
    root: Path
    config: dict[str, Any]
    flat: dict[str, Any]
    tags: dict[str, str] = field(default_factory=dict)
    sweep_dir: Path | None = None

    @property
    def group(self) -> str | None:
        """The sweep's name (its directory name), which groups its runs in every tool."""
        return self.sweep_dir.name if self.sweep_dir is not None else None


class Tracker(ABC):
    """One experiment tracker's view of one run."""

    name: str = ""

    @abstractmethod
    def state(self) -> dict[str, Any]:
        """What reopens this run later (kept in the run's ``trackers.json``)."""

    @abstractmethod
    def describe(self) -> str:
        """One line for the run's log: where the record is and how to look at it."""

    @abstractmethod
    def log_train(self, row: Mapping[str, Any]) -> None:
        """One ``metrics.csv`` row (step, loss, lr, tokens_per_s, grad_norm, ...)."""

    @abstractmethod
    def log_eval(self, rows: list[dict[str, Any]]) -> None:
        """Eval rows as ``eval.csv`` records them."""

    @abstractmethod
    def close(self, status: str) -> None:
        """Ends the run in the tool: ``finished``, ``failed`` or ``interrupted``."""


def finite(value: Any) -> bool:
    """Whether ``value`` is a finite number a tracker can log (an int or float; not a bool,
    NaN or infinity)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def train_values(row: Mapping[str, Any]) -> dict[str, float]:
    """``{"train/loss": ..., "train/lr": ..., ...}`` for the finite values of a metrics row."""
    return {f"train/{k}": float(row[k]) for k in TRAIN_KEYS if finite(row.get(k))}


def variant(row: Mapping[str, Any]) -> str:
    """An eval row's variant as the trackers name it: ``rope+yarn×4``, ``rope sliding w64 s32``."""
    label = short_label(str(row.get("encoding", "")), str(row.get("overrides") or ""))
    if row.get("mode", "full") != "full":
        label += f" {row['mode']} w{row.get('window')} s{row.get('stride')}"
    return label


def eval_values(rows: list[dict[str, Any]]) -> Iterator[tuple[str, int, dict[str, float]]]:
    """(variant, eval length, {metric: value}) for each eval row with values."""
    for row in rows:
        if row.get("status", "ok") != "ok":
            continue
        values = {m: float(row[m]) for m in EVAL_METRICS if finite(row.get(m))}
        if values:
            yield variant(row), int(row["eval_length"]), values


def eval_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """The eval rows as (columns, rows) for a tool's table view, status and reason included."""
    columns = ["variant", "eval_length", "mode", "status", "reason", *EVAL_METRICS]
    data = [
        [variant(r), int(r["eval_length"]), r.get("mode", "full"), r.get("status", "ok"),
         r.get("reason", "") or "", *(float(r[m]) if finite(r.get(m)) else None
                                      for m in EVAL_METRICS)]
        for r in rows
    ]  # fmt: skip
    return columns, data
