"""What a training run records: ``run.json`` (:func:`run_meta`, then one status write per
phase by :class:`RunRecord`, from rank 0 only) and the rows of ``metrics.csv``
(:func:`metrics_row`)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from posx.config.run_names import run_label
from posx.config.trust import needs_trust
from posx.errors import Interrupted, PosxError
from posx.runtime.distributed import World, mean_over_ranks
from posx.runtime.precision import precision_name
from posx.saved import SavedRun
from posx.saved.process import this_process
from posx.storage.results import SCHEMA_VERSION, write_json
from posx.version import __version__


def run_meta(
    cfg: DictConfig,
    run_dir: Path,
    names: dict[str, str],
    task_info: dict,
    device: torch.device,
) -> dict[str, Any]:
    """What every status write of ``run.json`` starts with: versions, labels, the training
    length and steps, the precisions that ran, and the run's fingerprint.

    Args:
        cfg: Composed, validated config.
        run_dir: The run's directory.
        names: Labels of the chosen ``encoding``, ``task``, ``model`` (and ``positions``).
        task_info: The task's own description (:meth:`~posx.tasks.base.Task.describe`).
        device: Where the run trains (``precision=auto`` is bf16 on CUDA, fp32 elsewhere).
    """
    positions = names.get("positions") or "default"
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "posx_version": __version__,
        "run": run_dir.name,
        # A non-default position strategy is part of what was trained: rope+randomized != rope.
        # An extension's label says what was done to its parent: rope+yarn×4+ft@256.
        "encoding": names.get("run_label") or run_label(names["encoding"], positions),
        "positions": positions,
        "positions_config": OmegaConf.to_container(cfg.get("positions") or {}, resolve=True),
        "task": names["task"],
        "model": names["model"],
        "seed": cfg.seed,
        "train_length": cfg.train.length,
        "steps": cfg.train.steps,
        "experiment": str(cfg.get("experiment_name") or ""),  # whose claims apply (posx check)
        "task_info": task_info,
        # What `auto` resolved to here: part of the identity (a GPU run in bf16 and a CPU run
        # in fp32 are not seeds of one experiment), and what `posx eval` evaluates in.
        "train_precision": precision_name(cfg.train.precision, device),
        "eval_precision": precision_name(cfg.eval.precision, device),
    }
    meta.update(lineage(cfg, names))
    # the whole configuration minus seed and bookkeeping, with the facts above: what
    # `posx report` groups by (it reads them back from this file)
    meta["fingerprint"] = SavedRun(run_dir).fingerprint_with(cfg, meta)
    # What `posx eval/resume --trust` must allow to load this run (informative only: a
    # run's own files never grant trust; see posx.config.trust).
    meta["needs_trust"] = needs_trust(cfg)
    return meta


def lineage(cfg: DictConfig, names: dict[str, str]) -> dict[str, Any]:
    """An extension's ``parent`` (directory, run, label, fingerprint, checkpoint hash, the step
    it started from) and ``extension`` (how it was fine-tuned) for ``run.json``; ``{}`` for a
    run trained from scratch."""
    ext = cfg.get("extend")
    if ext is None or not ext.parent:
        return {}
    parent = Path(str(ext.parent))
    return {
        "parent": {
            "dir": str(parent),
            "run": parent.name,
            "label": str(ext.parent_label),
            "fingerprint": str(ext.parent_fingerprint),
            "checkpoint_sha256": str(ext.parent_sha256),
            "step": int(ext.parent_step),
        },
        "extension": {
            "train_length": int(cfg.train.length),
            "steps": int(cfg.train.steps),
            "lr": float(cfg.train.lr),
            "warmup_steps": int(cfg.train.warmup_steps),
            "positions": names.get("positions") or "default",
            "encoding": OmegaConf.to_container(cfg.encoding, resolve=True),
            "base_length": ext.base_length,
            "resize": str(ext.resize),
        },
    }


@dataclass
class RunRecord:
    """Writes ``run.json`` as training moves through ``training`` and then ``trained``,
    ``interrupted`` or ``failed``, and remembers the step of the checkpoint on disk, which the
    failure message names.

    Every rank holds one (so every rank builds the same errors); only rank 0 writes.

    Attributes:
        run_dir: The run's directory.
        meta: What every status write starts with (:func:`run_meta` and the parameter
            count).
        world: This process's place among the training processes.
        saved: Step of the checkpoint on disk (the restored one, if any); ``None`` when there
            is none.
    """

    run_dir: Path
    meta: dict[str, Any]
    world: World
    saved: int | None = None

    def _write(self, fields: dict[str, Any]) -> None:
        if self.world.is_main:
            write_json(self.run_dir / "run.json", {**self.meta, **fields})

    def training(self, resumed_from: int | None) -> None:
        """Status ``training``; ``resumed_from`` is the restored checkpoint's step. The process
        that trains is recorded with it, so that ``posx extend`` and ``posx resume`` can tell a
        run still training from one whose process died."""
        self._write({"status": "training", "resumed_from": resumed_from,
                     "process": this_process()})  # fmt: skip

    def checkpointed(self, step: int) -> None:
        """Notes that the checkpoint on disk is now the one of ``step``."""
        self.saved = step

    def failed(self, what: str, at: int) -> PosxError:
        """Status ``failed`` with its step; the checkpoint on disk stays.

        Args:
            what: What went wrong, e.g. ``"loss became nan"``.
            at: The step it went wrong at, numbered as in ``metrics.csv``.

        Returns:
            The error for the caller to raise (it names the checkpoint that is kept).
        """
        kept = (
            f"the checkpoint of step {self.saved} is kept"
            if self.saved
            else "no checkpoint was saved (train.checkpoint_every=N keeps one)"
        )
        message = f"{what} at step {at}; training stopped, {kept}"
        self._write({"status": "failed", "step": at, "error": message})
        return PosxError(message)

    def interrupted(self, step: int) -> Interrupted:
        """Status ``interrupted`` at ``step`` (whose checkpoint was just saved).

        Returns:
            The error for the caller to raise; it says how to resume.
        """
        self._write({"status": "interrupted", "step": step})
        resume = f"posx resume {self.run_dir}"
        return Interrupted(f"interrupted at step {step}; checkpoint saved; run: {resume}")

    def trained(self, summary: dict[str, Any]) -> None:
        """Status ``trained`` with the training summary (final loss, throughput, ...)."""
        self._write({"status": "trained", **summary})


@dataclass
class StepResult:
    """What one optimisation step leaves for the metrics row.

    Attributes:
        loss: This rank's mean loss over its rows of the batch, a scalar ``[]``.
        lr: The learning rate the step used.
        tokens: Input tokens of the global batch (all ranks together).
        grad_norm: Global gradient norm ``[]`` before clipping; ``None`` when the step neither
            clips nor is logged (measuring it costs an unscale, and a sync on the GPU).
    """

    loss: torch.Tensor
    lr: float
    tokens: int
    grad_norm: torch.Tensor | None


@dataclass
class Throughput:
    """Tokens since the last metrics row, for its ``tokens_per_s``."""

    start: float
    tokens: int = 0

    def lap(self) -> tuple[float, float]:
        """Ends the window: returns (now, tokens per second over the window)."""
        now = time.perf_counter()
        tokens_per_s = self.tokens / max(now - self.start, 1e-9)
        self.start, self.tokens = now, 0
        return now, tokens_per_s


def metrics_row(
    step: int, result: StepResult, tokens: int, tokens_per_s: float, seconds: float, world: World
) -> dict[str, Any]:
    """One ``metrics.csv`` row. Every rank calls it: the loss is averaged across ranks.

    Args:
        step: Steps done.
        result: The step's loss, lr and gradient norm.
        tokens: Tokens seen so far.
        tokens_per_s: Throughput since the previous row.
        seconds: Since training started in this invocation.
        world: The ranks to average the loss over.
    """
    return {
        "schema_version": SCHEMA_VERSION,
        "step": step,
        "loss": mean_over_ranks(result.loss, world),
        "lr": result.lr,
        "tokens": tokens,
        "tokens_per_s": tokens_per_s,
        "grad_norm": float(result.grad_norm) if result.grad_norm is not None else math.nan,
        "seconds": seconds,
    }
