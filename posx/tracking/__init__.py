"""Experiment tracking: send a run's config, curve and eval rows to TensorBoard, W&B or MLflow.

The ``logger`` config group chooses them (``none``, ``tensorboard``, ``wandb``, ``mlflow``, or
several: ``logger=[tensorboard,mlflow]``).

Each selected tracker gets the run's config, its training curve and every eval row (see
:mod:`posx.tracking.base`); a sweep's runs are grouped (a W&B group, an MLflow parent run, a
TensorBoard directory per sweep). Each backend is an optional extra
(``pip install 'posx[wandb]'``); a missing one is a one-line error before training starts.
What reopens a run's trackers later (``posx resume``, ``posx eval``) is kept in its
``trackers.json``.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from posx.config.fingerprint import flat_config
from posx.config.run_names import run_label
from posx.errors import ConfigError, Interrupted, PosxError, one_line
from posx.saved import SavedRun
from posx.storage.results import write_json
from posx.tracking.base import RunRef, Tracker

log = logging.getLogger(__name__)
# logger name -> (the package it needs = its extra's name, module, class)
LOGGERS = {
    "tensorboard": ("tensorboard", "posx.tracking.tensorboard", "TensorBoardTracker"),
    "wandb": ("wandb", "posx.tracking.wandb", "WandbTracker"),
    "mlflow": ("mlflow", "posx.tracking.mlflow", "MlflowTracker"),
}
STATE_FILE = "trackers.json"

__all__ = [
    "LOGGERS",
    "Trackers",
    "check_loggers",
    "log_eval_rows",
    "open_trackers",
    "selected",
    "send_eval_rows",
]


def selected(cfg: DictConfig) -> dict[str, dict[str, Any]]:
    """The trackers a config selects, with their settings (``{}`` for ``logger=none``)."""
    node = cfg.get("logger")
    if node is None:
        return {}
    if not isinstance(node, DictConfig):
        raise ConfigError(f"logger must be a mapping of tracker settings, got {node!r}")
    out = {}
    for name in node:
        if name not in LOGGERS:
            raise ConfigError(
                f"unknown logger {name!r}; choose from none, {', '.join(LOGGERS)} "
                "(several at once: logger=[tensorboard,mlflow])"
            )
        settings = OmegaConf.to_container(node[name], resolve=True) if node[name] else {}
        out[str(name)] = dict(settings) if isinstance(settings, dict) else {}
    return out


def installed(package: str) -> bool:
    """Whether ``package`` can be imported here (without importing it: wandb and mlflow take
    seconds)."""
    return importlib.util.find_spec(package) is not None


def missing_package(name: str) -> str | None:
    """Why logger ``name`` cannot run here (its package is not installed), else None."""
    package = LOGGERS[name][0]
    if not installed(package):
        return f"logger={name} needs the {package} package: pip install 'posx[{name}]'"
    return None


def check_loggers(cfg: DictConfig) -> None:
    """Raises a one-line :class:`ConfigError` when a selected tracker is not installed."""
    for name in selected(cfg):
        why = missing_package(name)
        if why:
            raise ConfigError(why)


class Trackers:
    """The run's trackers, used as one. A tracker that fails while logging is reported once
    and dropped: the run's own files are the record, a tracker is a copy of it."""

    def __init__(self, trackers: list[Tracker]) -> None:
        self.trackers = trackers

    def _each(self, what: str, *args: Any) -> None:
        for tracker in list(self.trackers):
            try:
                getattr(tracker, what)(*args)
            except Exception as err:  # any backend error: keep training, say which stopped
                log.warning(f"posx: warning: {tracker.name} stopped logging: {one_line(err)}")
                self.trackers.remove(tracker)

    def log_train(self, row: Mapping[str, Any]) -> None:
        self._each("log_train", row)

    def log_eval(self, rows: list[dict[str, Any]]) -> None:
        self._each("log_eval", rows)

    def close(self, status: str) -> None:
        self._each("close", status)

    def __enter__(self) -> Trackers:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is None:
            self.close("finished")
        elif issubclass(kind, Interrupted | KeyboardInterrupt):
            self.close("interrupted")
        else:
            self.close("failed")


def _ref(cfg: DictConfig, run: SavedRun, ident: Mapping[str, Any], sweep: Path | None) -> RunRef:
    run_dir = run.path
    config = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(config, dict)
    tags = {k: str(ident[k]) for k in ("encoding", "task", "model", "seed", "train_length")}
    tags["fingerprint"] = run.fingerprint_with(cfg)
    tags["run_dir"] = str(run_dir.resolve())
    return RunRef(
        run_dir=run_dir,
        name=run_dir.name,
        root=Path(str(cfg.root)),
        config=config,
        flat=flat_config(cfg),
        tags=tags,
        sweep_dir=sweep,
    )


def _states(run_dir: Path) -> dict[str, dict[str, Any]]:
    path = run_dir / STATE_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except ValueError as err:
        raise PosxError(f"cannot read {path}: {one_line(err)}; move it aside") from err
    return data if isinstance(data, dict) else {}


def _open(name: str, settings: dict[str, Any], ref: RunRef, state: dict[str, Any]) -> Tracker:
    _, module, cls = LOGGERS[name]
    backend = getattr(importlib.import_module(module), cls)
    return backend(settings, ref, state)


def open_trackers(
    cfg: DictConfig, run_dir: Path, names: Mapping[str, str], sweep_dir: Path | None = None
) -> Trackers:
    """Opens (or, from ``trackers.json``, reopens) every tracker the config selects.

    Args:
        cfg: The run's config.
        run_dir: The run directory (``trackers.json`` is written there).
        names: The chosen ``encoding``, ``task``, ``model`` and ``positions`` options.
        sweep_dir: The sweep directory when the run is a job of a sweep.

    Raises:
        ConfigError: A tracker is not installed or cannot start (before any training).
    """
    chosen = selected(cfg)
    if not chosen:
        return Trackers([])
    check_loggers(cfg)
    ident = {
        "encoding": run_label(names["encoding"], names.get("positions")),
        "task": names["task"],
        "model": names["model"],
        "seed": cfg.seed,
        "train_length": cfg.train.length,
    }
    ref = _ref(cfg, SavedRun(run_dir), ident, sweep_dir)
    states = _states(run_dir)
    opened: list[Tracker] = []
    try:
        for name, settings in chosen.items():
            opened.append(_open(name, settings, ref, states.get(name, {})))
    except BaseException:
        Trackers(opened).close("failed")
        raise
    write_json(run_dir / STATE_FILE, {**states, **{t.name: t.state() for t in opened}})
    for tracker in opened:
        log.info(tracker.describe())
    return Trackers(opened)


def log_eval_rows(run: SavedRun, rows: list[dict[str, Any]]) -> list[str]:
    """Sends eval rows written after training (``posx eval``) to the saved run's trackers.

    Returns:
        Warnings: a tracker that is not installed here or failed (the rows are in eval.csv).
    """
    try:
        cfg = run.config
        chosen = selected(cfg)
    except PosxError as err:
        return [f"eval rows not sent to trackers: {err}"]
    if not chosen:
        return []
    try:
        ref = _ref(cfg, run, run.info, None)
    except (PosxError, KeyError, ValueError) as err:
        return [f"eval rows not sent to trackers: {one_line(err)}"]
    return send_eval_rows(chosen, ref, rows)


def send_eval_rows(
    chosen: Mapping[str, dict[str, Any]], ref: RunRef, rows: list[dict[str, Any]]
) -> list[str]:
    """Opens each chosen tracker (or reopens the one ``trackers.json`` records), sends it the
    eval rows and records it in ``trackers.json``, so the next evaluation appends to the same
    tracker run.

    Args:
        chosen: Tracker name -> settings (:func:`selected`).
        ref: The run the rows belong to.
        rows: Eval rows as ``eval.csv`` records them.

    Returns:
        Warnings: a tracker that is not installed here or failed (the rows are in eval.csv).
    """
    try:
        states = _states(ref.run_dir)
    except PosxError as err:
        return [f"eval rows not sent to trackers: {err}"]
    problems = []
    for name, settings in chosen.items():
        why = missing_package(name)
        if why:
            problems.append(f"eval rows not sent to {name}: {why}")
            continue
        try:
            with Trackers([_open(name, settings, ref, states.get(name, {}))]) as trackers:
                states.update({t.name: t.state() for t in trackers.trackers})
                write_json(
                    ref.run_dir / STATE_FILE, states
                )  # before logging: a later run reopens it
                trackers.log_eval(rows)
        except Exception as err:  # the rows are in eval.csv; a tracker is a copy
            problems.append(f"eval rows not sent to {name}: {one_line(err)}")
    return problems
