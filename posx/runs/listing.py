"""``posx runs``: one line per run below a results root, from the files each run keeps.

Status: ``finished`` (trained and evaluated), ``trained`` (not evaluated), ``training`` (started;
running now, or killed without a trace), ``interrupted`` (resumable), ``failed``, or
``unreadable`` (its ``run.json`` cannot be read; the reason is shown instead of the values).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from posx.storage.results import find_runs

COLUMNS = ("status", "encoding", "task", "model", "L_train", "steps", "seed", "final loss",
           "eval lengths", "run")  # fmt: skip


@dataclass
class RunLine:
    """One run as ``posx runs`` lists it."""

    status: str
    encoding: str
    task: str
    model: str
    train_length: str
    steps: str  # "done/total"
    seed: str
    final_loss: str
    lengths: str  # the eval lengths with a value, e.g. "64,128,256"
    path: str  # relative to the root

    def cells(self) -> list[str]:
        return [self.status, self.encoding, self.task, self.model, self.train_length, self.steps,
                self.seed, self.final_loss, self.lengths, self.path]  # fmt: skip


def _metrics_tail(run: Path) -> dict[str, Any]:
    try:
        frame = pd.read_csv(run / "metrics.csv")
        return frame.iloc[-1].to_dict() if len(frame) else {}
    except (OSError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return {}


def _lengths(run: Path) -> str:
    try:
        rows = pd.read_csv(run / "eval.csv", keep_default_na=False, na_values=[""])
        ok = rows[rows["status"].astype(str) == "ok"] if "status" in rows else rows
        lengths = sorted({int(x) for x in ok["eval_length"]})
    except (OSError, ValueError, KeyError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return "—"
    return ",".join(map(str, lengths)) or "—"


def _status(info: dict[str, Any], run: Path) -> str:
    status = str(info.get("status", "training"))
    if status == "trained":
        return "finished" if (run / "eval.csv").is_file() else "trained"
    return status


def run_line(run: Path, root: Path) -> RunLine:
    """What ``posx runs`` shows for one run directory."""
    rel = str(run.relative_to(root))
    try:
        info = json.loads((run / "run.json").read_text())
        if not isinstance(info, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as err:
        reason = str(err).splitlines()[0][:60]
        return RunLine("unreadable", "?", "?", "?", "?", "?", "?", "?", reason, rel)
    tail = _metrics_tail(run)
    total = info.get("steps", "?")
    status = _status(info, run)
    done = total if status in ("finished", "trained") else info.get("step", tail.get("step", 0))
    loss = info.get("final_loss", tail.get("loss", math.nan))
    try:
        loss_text = "—" if loss is None or math.isnan(float(loss)) else f"{float(loss):.4f}"
    except (TypeError, ValueError):
        loss_text = "?"
    return RunLine(
        status=status,
        encoding=str(info.get("encoding", "?")),
        task=str(info.get("task", "?")),
        model=str(info.get("model", "?")),
        train_length=str(info.get("train_length", "?")),
        steps=f"{int(done) if isinstance(done, int | float) else done}/{total}",
        seed=str(info.get("seed", "?")),
        final_loss=loss_text,
        lengths=_lengths(run),
        path=rel,
    )


def list_runs(root: Path) -> list[RunLine]:
    """Every run below ``root`` (sorted by directory), one :class:`RunLine` each."""
    return [run_line(run, root) for run in find_runs(root)]


def format_runs(lines: list[RunLine]) -> list[str]:
    """Aligned text lines: a header, then one line per run (never wrapped)."""
    table = [list(COLUMNS), *(line.cells() for line in lines)]
    widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS) - 1)]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in table
    ]
