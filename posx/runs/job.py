"""One job of ``posx train`` (or ``resume``): train, then evaluate, and what a failure does (a
sweep records it and goes on). :mod:`posx.runs.launch` hands each job Hydra composed to
:func:`run_job`; this module holds what needs torch, imported once a job runs.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from hydra.conf import HydraConf
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from posx.config.compose import eval_lengths
from posx.config.hints import one_line
from posx.config.paths import dirs_of_searchpath
from posx.config.run_names import chosen_options, run_names
from posx.config.trust import check_trusted
from posx.config.validate import validate
from posx.errors import Interrupted, PosxError
from posx.evaluation.sweep import evaluate_run
from posx.runs.evaluation import failures
from posx.runs.messages import next_commands, run_summary
from posx.runs.variants import check_variants, evaluate_variants
from posx.runtime.distributed import barrier, world
from posx.saved import SavedRun
from posx.storage.checkpoint import checkpoint_dir
from posx.storage.results import write_json
from posx.tracking import Trackers, check_loggers, open_trackers
from posx.training.loop import train
from posx.training.progress import tagged

# the name the runs' posx.log files have always shown for these lines
log = logging.getLogger("posx.runs.launch")


def train_and_evaluate(
    cfg: DictConfig, run_dir: Path, names: dict[str, str], sweep_dir: Path | None = None
) -> dict[str, Any]:
    """One run: trains as configured, then (``train.eval_at_end``) evaluates at the eval lengths
    with the trained model in memory. Under torchrun rank 0 evaluates while the others wait.

    The experiment trackers the config selects (``logger``) receive the config, the training
    curve and the eval rows; ``sweep_dir`` groups the run with the other jobs of its sweep.

    Returns:
        The training summary (final loss, tokens/s, parameters, seconds, world size).

    Raises:
        ConfigError: A tracker is not installed or cannot start (before training).
        PosxError: An eval length failed (its row, with the reason, is written first).
    """
    w = world()
    failed: list[str] = []
    rows = None
    with open_trackers(cfg, run_dir, names, sweep_dir) if w.is_main else Trackers([]) as tracked:
        result = train(cfg, run_dir, names, on_log=tracked.log_train)
        if cfg.train.eval_at_end and w.is_main:
            lengths = eval_lengths(cfg)
            at = ",".join(map(str, lengths))
            log.info(tagged(f"evaluating at L={at} ({cfg.eval.mode} mode)"))
            # the run is saved now (run.json, config, checkpoint): its rows are named from them
            saved = SavedRun(run_dir)
            rows = evaluate_run(saved, lengths, model=result.model, task=result.task, cfg=cfg)
            # eval.variants: the same weights under eval-time overrides, one row set each
            others = evaluate_variants(cfg, saved, result.model, result.task, lengths)
            tracked.log_eval(rows + others)
            failed = failures(rows + others)
        if w.is_main:
            for line in run_summary(run_dir, result.summary, rows, int(cfg.train.length)):
                log.info(line)
        barrier(w)
    if failed:  # the rows (with their reasons) are written; the run must not look finished
        raise PosxError(f"evaluation failed at {'; '.join(failed)}")
    return result.summary


def _names(cfg: DictConfig) -> dict[str, str]:
    """The run's labels, as its directory name has them (``${posx_run_name:}``)."""
    hc = HydraConfig.get()
    return run_names(cfg, chosen_options(hc.runtime.choices, dirs_of_searchpath(hc.searchpath)))


def run_job(cfg: DictConfig, debug: bool, trust: Sequence[str] | None = None) -> float | None:
    """One Hydra job; in a sweep a failure is recorded in the run's ``run.json`` and the sweep
    goes on (the caller counts the failures afterwards). With ``trust`` (a resumed run), only
    posx's and trusted ``_target_`` classes are built."""
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    multirun = hc.mode == RunMode.MULTIRUN
    try:
        return _train_job(cfg, run_dir, trust, hc, multirun)
    except Interrupted as err:  # Ctrl-C: the run is resumable, the sweep stops
        _error(f"posx: {err}")
        raise SystemExit(err.exit_code) from err
    except KeyboardInterrupt as err:  # a second Ctrl-C: stop now, without a new checkpoint
        _stopped_at_once(run_dir)
        raise SystemExit(130) from err
    except Exception as err:
        _job_failed(err, run_dir, debug, multirun)
        return None  # a sweep's failed job: recorded in its run.json, the next job runs


def _train_job(
    cfg: DictConfig, run_dir: Path, trust: Sequence[str] | None, hc: HydraConf, multirun: bool
) -> float:
    """Checks the job's config, then trains and evaluates it in ``run_dir``.

    Returns:
        The final training loss (what a Hydra sweeper optimises).
    """
    if world().is_main:
        log.info(f"run directory: {run_dir}")
    if trust is not None:
        check_trusted(cfg, trust, "the run's overrides")
    validate(cfg)
    check_variants(cfg)
    check_loggers(cfg)
    sweep_dir = Path(hc.sweep.dir) if multirun else None
    final_loss = train_and_evaluate(cfg, run_dir, _names(cfg), sweep_dir)["final_loss"]
    if world().is_main and not multirun:  # a sweep names its next commands once, at its end
        for line in next_commands(run_dir, Path(cfg.root), eval_lengths(cfg)):
            log.info(line)
    return final_loss


def _stopped_at_once(run_dir: Path) -> None:
    """Records and reports a job stopped by a second Ctrl-C, naming the checkpoint it can
    resume from, if any."""
    try:
        checkpoint_dir(run_dir)
        kept = f"resume from the last checkpoint: posx resume {run_dir}"
    except PosxError:
        kept = "no checkpoint was saved"
    message = f"stopped at once by a second Ctrl-C; {kept}"
    if world().is_main:
        mark_failed(run_dir, message)
    _error(f"posx: {message}")


def _job_failed(err: Exception, run_dir: Path, debug: bool, multirun: bool) -> None:
    """Records a failed job in its ``run.json`` and reports it (with the traceback under
    ``debug``). Called while ``err`` is being handled, so that the traceback is ``err``'s.

    Raises:
        SystemExit: Outside a sweep, with posx's exit code for the error (1 for a bug).
    """
    message = one_line(err)
    if not isinstance(err, PosxError):
        message = f"{type(err).__name__}: {message}"
    if multirun and isinstance(err, STICKY_DEVICE_ERRORS):
        message += (
            " (a CUDA error stays with the process that hit it: later jobs of this sweep in the"
            " same process fail too; `posx sweep status` lists them, rerun them once the cause"
            " is fixed)"
        )
    if world().is_main:
        mark_failed(run_dir, message)
    if debug:
        traceback.print_exc()
    if multirun:
        _error(f"posx: run {run_dir.name} failed: {message}")
        return
    _error(f"posx: error: {message}")
    raise SystemExit(err.exit_code if isinstance(err, PosxError) else 1) from err


# Errors the accelerator's runtime raises (misaligned address, illegal access, device-side
# assert): CUDA keeps them in the process's context, so every later CUDA call fails too.
STICKY_DEVICE_ERRORS: tuple[type[Exception], ...] = tuple(
    t for t in (getattr(torch, "AcceleratorError", None),) if t is not None
)


def _error(message: str) -> None:
    """An error on stderr and in the run's posx.log. Other torchrun ranks have no job logging
    (rank 0 alone writes files), so they print it."""
    if world().is_main:
        log.error(message)
    else:
        print(message, file=sys.stderr)


def mark_failed(run_dir: Path, message: str) -> None:
    """Records the failure in ``run.json`` (what `posx sweep status` reads)."""
    info_path = run_dir / "run.json"
    try:
        info = json.loads(info_path.read_text()) if info_path.is_file() else {"run": run_dir.name}
        write_json(info_path, {**info, "status": "failed", "error": message})
    except (OSError, ValueError):
        pass  # the run dir itself is unwritable: the message on stderr is all we can leave
