"""``posx eval``: which runs to evaluate, with which eval-time overrides, and what a damaged or
interrupted run does to the others."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posx.checkpoint import checkpoint_dir, verify_checkpoint
from posx.config import eval_lengths
from posx.errors import ConfigError, Interrupted, PosxError
from posx.evaluator import evaluate_run
from posx.results import find_runs, run_config
from posx.tracking import log_eval_rows

log = logging.getLogger(__name__)


def protocol_overrides(
    mode: str | None,
    window: int | None,
    stride: int | None,
    buckets: str | None,
) -> list[str]:
    """The ``eval.*`` overrides that ``--mode``, ``--window``, ``--stride``, ``--buckets`` stand
    for (only those given)."""
    if mode is not None and mode not in ("full", "sliding"):
        raise ConfigError(f"--mode must be full or sliding, got {mode!r}")
    if mode == "full" and (window is not None or stride is not None):
        raise ConfigError("--window and --stride apply to --mode sliding only")
    protocol = {"eval.mode": mode, "eval.window": window, "eval.stride": stride}
    protocol["eval.buckets"] = buckets
    return [f"{k}={v}" for k, v in protocol.items() if v is not None]


@dataclass
class Selection:
    """The runs ``posx eval`` will evaluate, and those it skips with the reason."""

    runs: list[Path]
    skipped: list[tuple[Path, str]] = field(default_factory=list)  # no checkpoint: fine
    damaged: list[tuple[Path, str]] = field(default_factory=list)  # damaged: exit 1 at the end


def select_runs(named: list[Path], root: Path) -> Selection:
    """Named runs must all be evaluable (else an error); without names, every trained run under
    ``root``, skipping those without a checkpoint and recording those with a damaged one."""
    if named:
        for run in named:
            run_config(run)
            verify_checkpoint(run)
        return Selection(list(named))
    chosen = Selection([])
    for run in find_runs(root):
        try:
            checkpoint_dir(run)
        except PosxError:
            chosen.skipped.append((run, "no checkpoint"))
            continue
        try:
            verify_checkpoint(run)
            chosen.runs.append(run)
        except PosxError as err:
            chosen.damaged.append((run, str(err)))
    if not chosen.runs and not chosen.damaged:
        raise ConfigError(f"no trained runs under {root}; run `posx train` first")
    return chosen


def evaluate_runs(
    runs: list[Path],
    lengths: list[int] | None,
    overrides: list[str],
    device: str = "auto",
    progress: bool = False,
    on_run: Callable[[Path, list[dict[str, Any]]], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> dict[Path, list[dict[str, Any]]]:
    """Evaluates each run at ``lengths`` (default: the run's own ``eval.lengths``).

    Args:
        runs: Run directories.
        lengths: Eval lengths, or ``None`` for each run's configured ones (:func:`eval_lengths`).
        overrides: Eval-time ``key=value`` overrides, recorded in every row.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        progress: A progress bar per run.
        on_run: Called with each run and its rows as soon as it is done.
        on_warning: Called with each warning (a run's tracker could not take its rows);
            default: logged.

    Returns:
        The rows written, per run.

    Raises:
        Interrupted: Ctrl-C; the runs evaluated before it keep their rows.
    """
    done: dict[Path, list[dict[str, Any]]] = {}
    for run in runs:
        run_lengths = lengths or eval_lengths(run_config(run))
        try:
            rows = evaluate_run(run, run_lengths, overrides, device=device, progress=progress)
        except KeyboardInterrupt as err:
            raise Interrupted(
                f"interrupted while evaluating {run.name}, no rows written for it; "
                f"{len(done)} of {len(runs)} run(s) were evaluated"
            ) from err
        done[run] = rows
        if on_run is not None:
            on_run(run, rows)
        for problem in log_eval_rows(run, rows):  # the trackers the run was trained with
            (on_warning or log.warning)(f"{run.name}: {problem}")
    return done


def failures(rows: list[dict[str, Any]]) -> list[str]:
    """``L=1024 (sliding): reason`` for each row that failed (``unsupported`` rows are not
    failures: the encoding says it cannot represent that length)."""
    return [
        f"L={r['eval_length']} ({r['mode']}): {r.get('reason') or 'no reason recorded'}"
        for r in rows
        if r["status"] == "failed"
    ]
