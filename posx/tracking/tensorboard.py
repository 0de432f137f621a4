"""TensorBoard: event files in ``<run dir>/tensorboard`` (``logger=tensorboard``).

With the default location a sweep's runs all lie below its directory, so
``tensorboard --logdir <sweep dir>`` shows that sweep and ``--logdir results`` every run. With
``logger.tensorboard.dir=DIR`` runs go to ``DIR/<sweep>/<run>`` (``DIR/<run>`` outside a sweep).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from posx.tracking.base import RunRef, Tracker, eval_table, eval_values, train_values


def log_dir(settings: Mapping[str, Any], run: RunRef) -> Path:
    """Where the run's event files go."""
    if not settings.get("dir"):
        return run.run_dir / "tensorboard"
    base = Path(str(settings["dir"])).expanduser()
    return base / run.group / run.name if run.group else base / run.name


def _markdown(columns: list[str], rows: list[list[Any]]) -> str:
    def show(v: Any) -> str:
        return "" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(show(v) for v in r) + " |" for r in rows])


class TensorBoardTracker(Tracker):
    """Scalars ``train/*`` by step and ``eval/<variant>/<metric>`` by eval length; the config
    and the eval table as text."""

    name = "tensorboard"

    def __init__(self, settings: Mapping[str, Any], run: RunRef, state: Mapping[str, Any]):
        self.dir = Path(state["dir"]) if state.get("dir") else log_dir(settings, run)
        self.reopened = bool(state)
        self.view = run.sweep_dir if run.sweep_dir is not None and not settings.get("dir") else None
        self.writer: Any = None  # torch's SummaryWriter, made on first use
        if not self.reopened:
            text = yaml.safe_dump(run.config, sort_keys=False)
            # four-space indent: a code block in TensorBoard's Markdown text view
            self._writer().add_text("config", "\n".join("    " + x for x in text.splitlines()))

    def _writer(self, first_step: int | None = None) -> Any:
        if self.writer is None:
            # the optional extra, imported when used (importing posx stays free of it)
            from torch.utils.tensorboard import SummaryWriter

            # a resumed run drops the steps a killed process logged after its last checkpoint
            purge = first_step if self.reopened and first_step is not None else None
            self.writer = SummaryWriter(str(self.dir), purge_step=purge)
        return self.writer

    def state(self) -> dict[str, Any]:
        return {"dir": str(self.dir.resolve())}

    def describe(self) -> str:
        view = self.view or self.dir
        return f"tensorboard: event files in {self.dir} (view: tensorboard --logdir {view})"

    def log_train(self, row: Mapping[str, Any]) -> None:
        writer = self._writer(int(row["step"]))
        for key, value in train_values(row).items():
            writer.add_scalar(key, value, int(row["step"]))

    def log_eval(self, rows: list[dict[str, Any]]) -> None:
        writer = self._writer()
        for name, length, values in eval_values(rows):
            for metric, value in values.items():
                writer.add_scalar(f"eval/{name}/{metric}", value, length)
        writer.add_text("eval", _markdown(*eval_table(rows)))

    def close(self, status: str) -> None:
        if self.writer is not None:
            self.writer.close()
