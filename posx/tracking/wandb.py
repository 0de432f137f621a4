"""Weights & Biases (``logger=wandb``): one W&B run per posx run, grouped by sweep.

``logger.wandb.mode`` is W&B's own: ``online``, ``offline`` (files only, upload later with
``wandb sync``), ``disabled``, or null to follow ``WANDB_MODE`` / ``wandb offline``. The run's
files go to ``<run dir>/wandb/`` unless ``logger.wandb.dir`` is set.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from posx.errors import ConfigError, one_line
from posx.tracking.base import RunRef, Tracker, eval_table, eval_values, train_values


class WandbTracker(Tracker):
    """History ``train/*`` at each step; ``eval/<variant>/<metric>`` against ``eval/length``
    (a custom x axis), an ``eval/table`` with every row; config and tags on the run."""

    name = "wandb"

    def __init__(self, settings: Mapping[str, Any], run: RunRef, state: Mapping[str, Any]):
        import wandb  # the optional extra, imported when used (importing posx stays free of it)

        self.wandb = wandb
        directory = Path(str(state.get("dir") or settings.get("dir") or run.run_dir))
        directory.mkdir(parents=True, exist_ok=True)
        kwargs: dict[str, Any] = {
            "project": state.get("project") or settings.get("project") or "posx",
            "entity": state.get("entity") or settings.get("entity"),
            "group": state.get("group", run.group),
            "name": run.name,
            "job_type": "train",
            "dir": str(directory),
            "tags": [
                *(settings.get("tags") or []),
                run.tags.get("encoding", ""),
                run.tags.get("task", ""),
            ],  # fmt: skip
            # posx prints its own progress; no console capture, no system-metrics thread
            "settings": wandb.Settings(
                console="off", silent=True, x_disable_stats=True, save_code=False
            ),
        }
        if state.get("id"):  # reopen the run (posx resume, posx eval)
            kwargs.update(id=state["id"], resume="allow")
        else:
            kwargs["config"] = run.config
        if settings.get("mode"):
            kwargs["mode"] = str(settings["mode"])
        try:
            self.run = wandb.init(**kwargs)
        except Exception as err:  # no login, no network, a bad entity: say so before training
            raise ConfigError(
                f"logger=wandb could not start a run: {one_line(err)} (to log without the "
                "network: logger.wandb.mode=offline or WANDB_MODE=offline)"
            ) from err
        self.dir = directory
        self.run.define_metric("eval/length")
        self.run.define_metric("eval/*", step_metric="eval/length")

    def state(self) -> dict[str, Any]:
        return {
            "id": self.run.id,
            "project": self.run.project,
            "entity": self.run.entity or None,
            "group": self.run.group or None,
            "dir": str(self.dir.resolve()),
            "offline": bool(self.run.offline),
        }

    def describe(self) -> str:
        if self.run.offline:
            where = Path(self.run.dir).parent  # .../wandb/offline-run-<time>-<id>
            return f"wandb: offline run {self.run.id} in {where} (upload: wandb sync {where})"
        return f"wandb: run {self.run.id} at {self.run.url}"

    def log_train(self, row: Mapping[str, Any]) -> None:
        # committed at once, so eval rows logged next never join this step's row
        self.run.log(train_values(row), step=int(row["step"]), commit=True)

    def log_eval(self, rows: list[dict[str, Any]]) -> None:
        for name, length, values in eval_values(rows):
            self.run.log({"eval/length": length, **{f"eval/{name}/{k}": v
                                                    for k, v in values.items()}})  # fmt: skip
        columns, data = eval_table(rows)
        table = self.wandb.Table(dataframe=pd.DataFrame(data, columns=columns))
        self.run.log({"eval/table": table})

    def close(self, status: str) -> None:
        self.run.finish(exit_code=0 if status == "finished" else 1)
