"""Training progress: a live bar on a terminal, plain periodic lines everywhere else.

Under SLURM or with stdout piped to a file, a live bar is one ever-rewritten line; there posx
prints a plain line every ``train.progress_every`` seconds instead (first and last logged step
always). The same lines go to the run's ``posx.log`` in both cases (see :mod:`posx.logs`).

In a sweep (``posx train -m``) each line starts with the run's directory name,
``[copy_rope_L16_s0_3] step 40/100 ...``: the jobs of a parallel launcher
(``hydra/launcher=local_parallel``) share one terminal and their lines interleave. Such jobs
print lines even on a terminal, since two live bars would overwrite each other's line.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

log = logging.getLogger("posx.train")

# Hydra's default launcher runs a sweep's jobs one after another in this process; any other
# (joblib, submitit, a plugin) may run them side by side.
SEQUENTIAL_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


@dataclass(frozen=True)
class SweepJob:
    """What this process trains as one job of a Hydra multirun.

    Attributes:
        tag: The run's directory name ("" outside a multirun).
        parallel: Whether other jobs of the sweep may run at the same time.
    """

    tag: str = ""
    parallel: bool = False


def sweep_job() -> SweepJob:
    """The job of a Hydra multirun this process runs, read from Hydra's job config; empty for a
    single run and outside Hydra (the Python API, tests)."""
    if not HydraConfig.initialized():
        return SweepJob()
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return SweepJob()
    launcher = str(hc.launcher.get("_target_", ""))
    return SweepJob(Path(hc.runtime.output_dir).name, launcher != SEQUENTIAL_LAUNCHER)


def tagged(message: str, job: SweepJob | None = None) -> str:
    """``message`` prefixed with ``[run name]`` in a multirun, whose jobs' lines may interleave
    (``job``: default, this process's :func:`sweep_job`)."""
    tag = (job or sweep_job()).tag
    return f"[{tag}] {message}" if tag else message


def stdout_is_terminal() -> bool:
    """Whether stdout is an interactive terminal (rich's view: FORCE_TERMINAL, Jupyter, tty)."""
    return Console().is_terminal


def duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h04m``."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def progress_line(step: int, total: int, row: dict[str, Any], eta: float) -> str:
    """``step 40/100 (40%)  loss 2.4844  lr 2.9e-03  grad 0.512  2,375 tok/s  eta 1m12s``."""
    width = len(str(total))
    parts = [f"step {step:>{width}}/{total} ({100 * step // max(total, 1):>3}%)"]
    parts.append(f"loss {row['loss']:.4f}")
    parts.append(f"lr {row['lr']:.2e}")
    if row.get("grad_norm") is not None and math.isfinite(row["grad_norm"]):
        parts.append(f"grad {row['grad_norm']:.3g}")
    parts.append(f"{row['tokens_per_s']:,.0f} tok/s")
    parts.append(f"eta {duration(eta)}" if step < total else f"took {duration(row['seconds'])}")
    return "  ".join(parts)


class TrainProgress:
    """The live bar (terminal, ``train.progress``) and the periodic plain lines, each naming its
    run in a sweep (see the module docstring).

    Args:
        total: Steps to train to.
        start: The step training starts from (a resumed run's checkpoint).
        enabled: ``train.progress`` and this process writes (rank 0).
        every: Seconds between plain lines.
    """

    def __init__(self, total: int, start: int, enabled: bool, every: float) -> None:
        self.total, self.start, self.every = total, start, every
        self.job = sweep_job()
        self.live = enabled and stdout_is_terminal() and not self.job.parallel
        self.lines_on_console = enabled and not self.live
        self.last_line = -math.inf
        self.began = time.perf_counter()
        self.bar = Progress(
            # not the run's long name (printed just above): an 80-column terminal keeps the bar
            TextColumn("[bold]train"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TextColumn("loss {task.fields[loss]}"),
            TextColumn("{task.fields[tps]} tok/s"),
            TimeRemainingColumn(),
            disable=not self.live or start >= total,
        )
        # no loss or speed before the first logged step (never a made-up 0 or nan)
        self.task = self.bar.add_task("train", total=total, completed=start, loss="—", tps="—")

    def __enter__(self) -> TrainProgress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(*exc)  # type: ignore[arg-type]

    def update(self, step: int, row: dict[str, Any]) -> None:
        """A logged step: moves the bar; writes a plain line when one is due."""
        loss, tps = f"{row['loss']:.4f}", f"{row['tokens_per_s']:,.0f}"
        self.bar.update(self.task, completed=step, loss=loss, tps=tps)
        now = time.perf_counter()
        first = self.last_line == -math.inf
        if not (first or step >= self.total or now - self.last_line >= self.every):
            return
        self.last_line = now
        done = step - self.start
        eta = (now - self.began) / done * (self.total - step) if done > 0 else math.nan
        line = tagged(progress_line(step, self.total, row, eta), self.job)
        log.info(line, extra={"console": self.lines_on_console})
