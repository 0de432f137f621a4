"""MLflow (``logger=mlflow``): one MLflow run per posx run; a sweep's runs are children of one
parent run named after the sweep.

``logger.mlflow.tracking_uri``: null follows ``MLFLOW_TRACKING_URI``, else a local SQLite store
``<root>/mlflow.db`` (MLflow's own default backend, placed beside the results instead of the
working directory). A ``file:`` URI or a plain path is MLflow's file store; MLflow keeps it in
maintenance mode behind ``MLFLOW_ALLOW_FILE_STORE``, which posx sets for a store you chose.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from posx.errors import ConfigError, one_line
from posx.storage.results import locked, write_json
from posx.tracking.base import RunRef, Tracker, eval_values, train_values

BATCH = 100  # MLflow's limit of params per log_batch call
MAX_PARAM = 6000  # characters of one param value


def tracking_uri(settings: Mapping[str, Any], root: Path) -> str:
    """The store to log to (see the module docstring)."""
    uri = settings.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        return f"sqlite:///{(root / 'mlflow.db').resolve()}"
    uri = str(uri)
    if "://" not in uri and not uri.startswith("file:"):  # a plain directory
        uri = Path(uri).expanduser().resolve().as_uri()
    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return uri


def metric_key(text: str) -> str:
    """A valid MLflow metric name (letters, digits, ``_ - . : /`` and spaces): ``×`` -> ``x``,
    anything else -> ``_`` (``eval/rope+yarn×4/loss`` -> ``eval/rope_yarnx4/loss``)."""
    return re.sub(r"[^\w\-. :/]", "_", text.replace("×", "x"), flags=re.ASCII)


class MlflowTracker(Tracker):
    """Metrics ``train/*`` at each step, ``eval/<variant>/<metric>`` at step = eval length;
    the flattened config as params, the identity as tags, the config as ``config.yaml``."""

    name = "mlflow"

    def __init__(self, settings: Mapping[str, Any], run: RunRef, state: Mapping[str, Any]):
        # the optional extra, imported when used (importing posx stays free of it)
        from mlflow.tracking import MlflowClient

        self.uri = str(state.get("tracking_uri") or tracking_uri(settings, run.root))
        run.root.mkdir(parents=True, exist_ok=True)
        try:
            # one process at a time creates the store and the experiment (parallel sweep jobs)
            with locked(run.root / "mlflow"):
                self.client = MlflowClient(tracking_uri=self.uri)
                experiment = str(settings.get("experiment") or "posx")
                self.experiment_id = state.get("experiment_id") or self._experiment(
                    experiment, run.root
                )
                if state.get("run_id"):
                    self.run_id = str(state["run_id"])
                    self.client.update_run(self.run_id, status="RUNNING")
                else:
                    self.run_id = self._create(run)
        except ConfigError:
            raise
        except Exception as err:  # a bad URI, an unreachable server: say so before training
            raise ConfigError(
                f"logger=mlflow could not start a run at {self.uri}: {one_line(err)}"
            ) from err

    def _experiment(self, name: str, root: Path) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return str(found.experiment_id)
        # artifacts beside the results, not in the working directory
        where = None if self.uri.startswith("file:") else (root / "mlartifacts").resolve().as_uri()
        return str(self.client.create_experiment(name, artifact_location=where))

    def _parent(self, run: RunRef) -> str | None:
        """The sweep's parent run, created by its first job (under a lock in the sweep dir)."""
        if run.sweep_dir is None:
            return None
        path = run.sweep_dir / ".mlflow_parent.json"
        with locked(path):
            if path.is_file():
                known = json.loads(path.read_text())
                if known.get("tracking_uri") == self.uri and known.get("run_id"):
                    return str(known["run_id"])
            parent = self.client.create_run(
                self.experiment_id,
                run_name=run.sweep_dir.name,
                tags={"posx.sweep": run.sweep_dir.name, "posx.sweep_dir": str(run.sweep_dir)},
            )
            self.client.set_terminated(parent.info.run_id)  # a container: its children run
            write_json(path, {"tracking_uri": self.uri, "run_id": parent.info.run_id})
            return str(parent.info.run_id)

    def _create(self, run: RunRef) -> str:
        tags = {f"posx.{k}": str(v) for k, v in run.tags.items()}
        parent = self._parent(run)
        if parent:
            tags["mlflow.parentRunId"] = parent
            tags["posx.sweep"] = run.group or ""
        created = self.client.create_run(self.experiment_id, run_name=run.name, tags=tags)
        run_id = str(created.info.run_id)
        from mlflow.entities import Param

        params = [Param(k, str(v)[:MAX_PARAM]) for k, v in sorted(run.flat.items())]
        for i in range(0, len(params), BATCH):
            self.client.log_batch(run_id, params=params[i : i + BATCH])
        self.client.log_dict(run_id, run.config, "config.yaml")
        return run_id

    def state(self) -> dict[str, Any]:
        return {
            "tracking_uri": self.uri,
            "experiment_id": self.experiment_id,
            "run_id": self.run_id,
        }

    def describe(self) -> str:
        return (
            f"mlflow: run {self.run_id} (experiment {self.experiment_id}) at {self.uri} "
            f"(view: mlflow ui --backend-store-uri {self.uri})"
        )

    def _log(self, values: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(metric_key(k), v, now, step) for k, v in values.items()]
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[i : i + 1000])

    def log_train(self, row: Mapping[str, Any]) -> None:
        self._log(train_values(row), int(row["step"]))

    def log_eval(self, rows: list[dict[str, Any]]) -> None:
        for name, length, values in eval_values(rows):
            self._log({f"eval/{name}/{k}": v for k, v in values.items()}, length)

    def close(self, status: str) -> None:
        end = {"finished": "FINISHED", "failed": "FAILED"}.get(status, "KILLED")
        self.client.set_terminated(self.run_id, end)
