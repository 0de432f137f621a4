"""``posx eval``: which runs to evaluate, with which eval-time overrides, and what a damaged or
interrupted run does to the others."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posx.config.build import build_positions
from posx.config.compose import eval_lengths
from posx.config.trust import UntrustedTarget
from posx.errors import ConfigError, Interrupted, PosxError
from posx.evaluation.data import CACHE_DIR
from posx.evaluation.sweep import ROW_KEYS, evaluate_run
from posx.runs.resources import check_eval_fits, model_for_estimates
from posx.runtime.distributed import pick_device
from posx.saved import SavedRun
from posx.storage.results import check_writable, find_runs, read_table
from posx.tracking import log_eval_rows

log = logging.getLogger(__name__)


@dataclass
class Selection:
    """The runs ``posx eval`` will evaluate, and those it skips with the reason."""

    runs: list[SavedRun]
    skipped: list[tuple[SavedRun, str]] = field(default_factory=list)  # no checkpoint: fine
    # damaged files, a config that does not match its checkpoint, untrusted code: exit 1 at the end
    damaged: list[tuple[SavedRun, str]] = field(default_factory=list)


def check_run(run: SavedRun, overrides: list[str], trust: Sequence[str]) -> None:
    """Everything that can refuse a run before any evaluation: its files, its checkpoint's
    headers, its config against the checkpoint, the overrides, untrusted targets, and its
    data against what its training recorded.

    Raises:
        ConfigError: Not a run directory, a bad eval-time override, or ``UntrustedTarget``.
        PosxError: The run's own files are damaged or do not fit each other, or its corpus
            changed since training.
    """
    if not run.path.is_dir():
        raise ConfigError(f"run directory does not exist: {run.path}")
    run.verify_checkpoint()  # no checkpoint is the likeliest problem: it is named first
    run.config  # noqa: B018 - read (and refused when damaged) before run.json, as always
    run.info  # noqa: B018
    run.loadable_config(overrides, trust)
    for name in ("eval.csv", "eval_positions.csv"):  # rows will merge into these
        if (run.path / name).is_file():
            read_table(run.path / name, ROW_KEYS)
    run.check_same_data(overrides, trust)


def select_runs(
    named: Sequence[Path | SavedRun],
    root: Path,
    overrides: Sequence[str] = (),
    trust: Sequence[str] = (),
    fits: Callable[[SavedRun], str] | None = None,
) -> Selection:
    """Named runs must all be evaluable (else an error); without names, every trained run under
    ``root``, skipping those without a checkpoint and recording those that are damaged or
    refused (see :func:`check_run`). Each run is opened here, once.

    ``fits`` says why an eval-time variant does not apply to a run (``""`` when it does): a
    named run it does not fit is an error, an unnamed one is skipped with the reason."""
    if named:
        runs = [SavedRun.of(run) for run in named]
        for run in runs:
            why = fits(run) if fits is not None and run.has_checkpoint() else ""
            if why:
                raise ConfigError(why)
            check_run(run, list(overrides), trust)
        check_outputs(runs)
        return Selection(runs)
    chosen = Selection([])
    for run in map(SavedRun, find_runs(root)):
        if not run.has_checkpoint():
            chosen.skipped.append((run, "no checkpoint"))
            continue
        try:  # this run's own files, e.g. no .hydra/config.yaml
            run.config  # noqa: B018
        except PosxError as err:
            chosen.damaged.append((run, str(err)))
            continue
        why = fits(run) if fits is not None else ""
        if why:
            chosen.skipped.append((run, why))
            continue
        try:
            check_run(run, list(overrides), trust)
            chosen.runs.append(run)
        except UntrustedTarget as err:
            chosen.damaged.append((run, str(err)))
        except ConfigError:  # a bad override or option: wrong for every run, so stop here
            raise
        except PosxError as err:
            chosen.damaged.append((run, str(err)))
    if not chosen.runs and not chosen.damaged:
        raise ConfigError(f"no trained runs under {root}; run `posx train` first")
    check_outputs(chosen.runs)
    return chosen


def check_outputs(runs: list[SavedRun]) -> None:
    """Every place evaluation writes (each run directory, each eval cache) must be writable
    before the first run is evaluated, not found out after the work is done."""
    hint = "make it writable, or evaluate a copy of the run"
    places = [*(r.path for r in runs), *(r.results_root / CACHE_DIR for r in runs)]
    for place in dict.fromkeys(places):
        what = "eval cache" if place.name == CACHE_DIR else "run directory"
        check_writable(place, what, hint)


def evaluate_runs(
    runs: Sequence[SavedRun | Path],
    lengths: list[int] | None,
    overrides: list[str],
    device: str = "auto",
    progress: bool = False,
    on_run: Callable[[SavedRun, list[dict[str, Any]]], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    trust: Sequence[str] = (),
    max_memory: int | None = None,
) -> dict[SavedRun, list[dict[str, Any]]]:
    """Evaluates each run at ``lengths`` (default: the run's own ``eval.lengths``).

    Args:
        runs: Saved runs (from :func:`select_runs`), or run directories to open.
        lengths: Eval lengths, or ``None`` for each run's configured ones (:func:`eval_lengths`).
        overrides: Eval-time ``key=value`` overrides, recorded in every row.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        progress: A progress bar per run.
        on_run: Called with each run and its rows as soon as it is done.
        on_warning: Called with each warning (a run's tracker could not take its rows);
            default: logged.
        trust: Module prefixes whose ``_target_`` classes may be built (see
            :mod:`posx.config.trust`).
        max_memory: Bytes an evaluation may use (None: what is available); every run and length
            is checked against an estimate before the first one starts.

    Returns:
        The rows written, per run.

    Raises:
        ConfigError: A run at a length that cannot fit in memory (before any work).
        PosxError: A run whose corpus changed since training (before any work).
        Interrupted: Ctrl-C; the runs evaluated before it keep their rows.
    """
    opened = [SavedRun.of(run) for run in runs]
    for run in opened:  # before any work; runs chosen by select_runs passed these already
        # (a run opened by select_runs answers from what it read; a direct caller's is read now)
        run.check_same_data(overrides, trust)
        check_eval_memory(run, lengths, overrides, device, max_memory, trust)
    done: dict[SavedRun, list[dict[str, Any]]] = {}
    for run in opened:
        run_lengths = lengths or eval_lengths(run.config)
        try:
            rows = evaluate_run(
                run, run_lengths, overrides, device=device, progress=progress, trust=trust
            )
        except KeyboardInterrupt as err:
            raise Interrupted(
                f"interrupted while evaluating {run.name}, no rows written for it; "
                f"{len(done)} of {len(opened)} run(s) were evaluated"
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


def check_eval_memory(
    run: SavedRun,
    lengths: list[int] | None,
    overrides: list[str],
    device: str,
    max_memory: int | None,
    trust: Sequence[str] = (),
) -> None:
    """Refuses a length of ``run`` whose evaluation cannot fit in memory, estimated from the
    run's config and its checkpoint's header with the model on the ``meta`` device."""
    cfg = run.loadable_config(overrides, trust)
    shapes = run.shapes
    head = shapes.get("head.weight") or shapes.get("tok.weight")  # [vocab, d_model]
    if not head:
        raise PosxError(f"checkpoint in {run.path} has no head.weight: not a posx model")
    vocab = head[0]
    model = model_for_estimates(cfg, vocab)
    hint = (
        "evaluate shorter lengths, lower eval.batch_tokens (as key=value), or pass "
        "--max-memory SIZE"
    )
    check_eval_fits(cfg, model, build_positions(cfg), lengths or eval_lengths(cfg),
                    pick_device(device), max_memory, f"evaluating {run.name}", hint)  # fmt: skip
