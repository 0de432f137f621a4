"""The training loop: :func:`train` reads top to bottom; one optimisation step is
:meth:`Trainer.train_step`; what the run records is :mod:`posx.training.record`."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from omegaconf import DictConfig
from torch.nn.parallel import DistributedDataParallel

from posx.config.build import build_model, build_positions, build_task
from posx.model.transformer import TransformerLM
from posx.positions import PositionStrategy, step_positions, structured_step_positions
from posx.runtime.distributed import (
    World,
    barrier,
    check_in_sync,
    init_process_group,
    pick_device,
    shard,
)
from posx.runtime.precision import autocast_context, grad_scaler
from posx.storage.checkpoint import (
    check_identity,
    checkpoint_dir,
    config_identity,
    save_checkpoint,
)
from posx.storage.results import write_csv
from posx.tasks.base import Batch, Task
from posx.training.losses import masked_loss
from posx.training.optim import grad_norm, lr_at, make_optimizer
from posx.training.progress import TrainProgress, tagged
from posx.training.record import RunRecord, StepResult, Throughput, metrics_row, run_meta
from posx.training.resume import StopOnInterrupt, restore, rng_states, start_from_parent

log = logging.getLogger(__name__)


@dataclass
class Trained:
    """What :func:`train` leaves: the summary written to ``run.json`` and, so that the caller
    can evaluate without reloading the checkpoint, the trained model and its task."""

    summary: dict[str, Any]
    model: TransformerLM
    task: Task


@dataclass
class Trainer:
    """Everything an optimisation step and a checkpoint touch.

    Attributes:
        cfg: Composed, validated config.
        world: This process's place among the training processes.
        device: Where the model and batches live.
        task: Source of the training batches.
        model: The bare model (what is checkpointed and returned).
        wrapped: ``model`` in ``DistributedDataParallel`` under torchrun, else ``model``.
        forward: ``wrapped``, compiled with ``train.compile``; ``(inputs [b, s], positions
            [b, s]) -> logits [b, s, V]``.
        optimizer: The optimizer (its lr is set every step from the schedule).
        scaler: Gradient scaler (enabled for fp16 only).
        positions: Training-time position strategy.
        data_rng: Generator of the data order (checkpointed, so a resume draws the same).
    """

    cfg: DictConfig
    world: World
    device: torch.device
    task: Task
    model: TransformerLM
    wrapped: torch.nn.Module
    forward: Callable[..., torch.Tensor]
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    positions: PositionStrategy
    data_rng: torch.Generator

    def train_step(self, step: int, logged: bool, record: RunRecord) -> StepResult:
        """One optimisation step on the next batch.

        This rank's rows are ``[b, s]`` with ``b = train.batch_size / world size`` and
        ``s = train.length``.

        Args:
            step: Steps done so far (this one is row ``step + 1`` of ``metrics.csv``).
            logged: Whether this step gets a metrics row (so its gradient norm is measured).
            record: Where a non-finite loss is recorded as the run's failure.

        Returns:
            The loss, lr, tokens and gradient norm of the step.

        Raises:
            PosxError: The loss is not finite (``run.json`` then says ``failed``).
        """
        tcfg, world, device = self.cfg.train, self.world, self.device
        lr = lr_at(step, self.cfg)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        batch = shard(self.task.train_batch(tcfg.batch_size, tcfg.length, self.data_rng), world)
        pos = self.step_positions(step, batch)
        batch = batch.to(device)
        with autocast_context(device, tcfg.precision):
            logits = self.forward(batch.inputs, pos.to(device))
        loss = masked_loss(logits, batch)
        if not torch.isfinite(loss):  # numbered as in metrics.csv: step s+1 is this batch
            raise record.failed(f"loss became {loss.item()}", step + 1)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()  # fp16 only: scaled so small gradients survive
        norm = None
        if tcfg.grad_clip > 0 or logged:
            self.scaler.unscale_(self.optimizer)  # the norm and the clipping see true gradients
            norm = grad_norm(self.model, tcfg.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return StepResult(loss, lr, batch.inputs.numel() * world.size, norm)

    def step_positions(self, step: int, batch: Batch) -> torch.Tensor:
        """Positions of step ``step`` for this rank's rows of ``batch`` (on the CPU).

        ``[s]`` or ``[b, s]`` with ``s`` the batch's width (``train.length`` tokens, or the
        tokens a task in other units lays its instances out in); from the task's per-token
        structure for strategies that declare ``needs_structure``.
        """
        if not self.positions.needs_structure:
            return step_positions(
                self.positions, self.cfg.seed, step, self.cfg.train.batch_size,
                batch.inputs.shape[1], self.world,
            )  # fmt: skip
        structure = self.task.structure(batch.inputs)
        return structured_step_positions(self.positions, structure, self.cfg.seed, step, self.world)

    def checkpoint(
        self, done: int, tokens: int, identity: dict[str, Any], record: RunRecord
    ) -> None:
        """Saves the checkpoint of step ``done`` (rank 0 writes; all ranks wait for it).

        Args:
            done: Steps done.
            tokens: Tokens seen so far.
            identity: What the weights mean (:func:`~posx.storage.checkpoint.config_identity`).
            record: Told the new checkpoint's step; records non-finite weights as the failure.

        Raises:
            PosxError: The weights are not finite; the last good checkpoint stays.
        """
        # Never replace the last good checkpoint with diverged weights. Every rank checks (the
        # weights are identical), so all ranks stop together instead of hanging in a barrier.
        if not all(bool(torch.isfinite(p).all()) for p in self.model.parameters()):
            raise record.failed("the weights became non-finite", done)
        if self.world.is_main:
            state = {"step": done, "tokens": tokens, "identity": identity}
            save_checkpoint(
                record.run_dir, self.model, self.optimizer, state, rng_states(self.data_rng)
            )
        record.checkpointed(done)
        barrier(self.world)


def prepare(cfg: DictConfig, run_dir: Path) -> tuple[Trainer, int, int, list[dict[str, Any]]]:
    """Joins the process group and builds the model, optimizer and data order; with
    ``train.resume`` and a checkpoint in ``run_dir``, restores it; else an extension
    (``extend.parent``) starts from its parent's final weights and data order.

    Returns:
        The trainer, the steps and tokens done (0 and 0 for a fresh run) and the metrics rows
        up to the restored step.
    """
    tcfg = cfg.train
    world = init_process_group()
    if tcfg.threads:
        torch.set_num_threads(tcfg.threads)
    device = pick_device(tcfg.device, world)
    torch.manual_seed(cfg.seed)
    data_rng = torch.Generator().manual_seed(cfg.seed)  # the data order depends on the seed alone

    task = build_task(cfg)
    model = build_model(cfg, task.vocab_size).to(device)
    positions = build_positions(cfg)
    positions.check(model.encoding, tcfg.length, task.longest_number(tcfg.length))
    optimizer = make_optimizer(model, cfg, device)
    step, tokens_seen, rows = 0, 0, []
    if tcfg.resume and any((run_dir / d).is_dir() for d in ("checkpoint", ".checkpoint.old")):
        checkpoint_dir(run_dir)  # a clear error if the checkpoint is incomplete
        check_identity(run_dir, cfg, "the config to resume with")
        step, tokens_seen, rows = restore(run_dir, model, optimizer, data_rng)
    elif cfg.get("extend") is not None and cfg.extend.parent:  # `posx extend`: a new start
        start_from_parent(cfg, model, data_rng)
    # Restored before wrapping: DDP copies rank 0's weights to the other ranks when it wraps.
    wrapped = DistributedDataParallel(model) if world.distributed else model
    # compiled for training only: evaluation runs other lengths, which would recompile
    forward = torch.compile(wrapped) if tcfg.compile else wrapped
    scaler = grad_scaler(device, tcfg.precision)
    trainer = Trainer(
        cfg, world, device, task, model, wrapped, forward, optimizer, scaler, positions, data_rng
    )
    return trainer, step, tokens_seen, rows


def _announce(step: int, steps: int, device: torch.device) -> None:
    """Logs how many steps this invocation trains (none when resuming a finished run)."""
    if step >= steps:  # `posx resume` of a run whose training is complete
        log.info(tagged(f"already trained: the checkpoint is at step {step} of {steps}"))
    else:
        from_step = f" from step {step}" if step else ""
        log.info(tagged(f"training {steps - step} steps on {device.type}{from_step}"))


def _publish(
    rows: list[dict[str, Any]],
    run_dir: Path,
    progress: TrainProgress,
    on_log: Callable[[dict[str, Any]], None] | None,
) -> None:
    """Rewrites ``metrics.csv`` with the new row (so it survives a crash) and reports it."""
    write_csv(run_dir / "metrics.csv", pd.DataFrame(rows))
    progress.update(int(rows[-1]["step"]), rows[-1])
    if on_log is not None:
        on_log(rows[-1])


def train(
    cfg: DictConfig,
    run_dir: Path,
    names: dict[str, str],
    on_log: Callable[[dict[str, Any]], None] | None = None,
) -> Trained:
    """Trains one model as configured and writes everything into ``run_dir``.

    Under torchrun every rank runs this; rank 0 alone writes files. With ``train.resume`` and a
    checkpoint in ``run_dir`` it continues where that checkpoint stopped, bit for bit on CPU.

    Args:
        cfg: Composed, validated config.
        run_dir: The run's directory (Hydra's output dir).
        names: Labels of the chosen ``encoding``, ``task`` and ``model`` options.
        on_log: Called (on rank 0) with every ``metrics.csv`` row as it is logged: step, loss,
            lr, tokens, tokens_per_s, grad_norm (before clipping), seconds; e.g. to send the
            training curve to an experiment tracker.

    Returns:
        The summary (final loss, tokens/s, parameter count, seconds), the model and the task.
    """
    tcfg = cfg.train
    # Set-up and resume: the model, optimizer and data order as of the checkpoint, if any.
    trainer, step, tokens_seen, rows = prepare(cfg, run_dir)
    world, model = trainer.world, trainer.model
    meta = {
        **run_meta(cfg, run_dir, names, trainer.task.describe(), trainer.device),
        "parameters": model.num_parameters(),
    }
    record = RunRecord(run_dir, meta, world, saved=step or None)
    record.training(resumed_from=step or None)
    identity = config_identity(cfg)  # what the weights mean; loading checks it against the config
    start = time.perf_counter()
    window, first_step = Throughput(start), step
    if world.is_main:
        _announce(step, tcfg.steps, trainer.device)

    # The loop. A Ctrl-C stops it at a step boundary, so the checkpoint is a consistent state.
    progress = TrainProgress(
        tcfg.steps, step, bool(tcfg.progress and world.is_main), tcfg.progress_every
    )
    with progress, StopOnInterrupt() as stop:
        trainer.wrapped.train()
        while step < tcfg.steps:
            logged = (step + 1) % tcfg.log_every == 0 or step + 1 == tcfg.steps
            result = trainer.train_step(step, logged, record)
            step += 1
            tokens_seen += result.tokens
            window.tokens += result.tokens
            if logged:
                now, tokens_per_s = window.lap()
                row = metrics_row(step, result, tokens_seen, tokens_per_s, now - start, world)
                rows.append(row)
                if world.is_main:
                    _publish(rows, run_dir, progress, on_log)
            if stop.requested:
                trainer.checkpoint(step, tokens_seen, identity, record)
                raise record.interrupted(step)
            if tcfg.checkpoint_every and step % tcfg.checkpoint_every == 0 and step < tcfg.steps:
                trainer.checkpoint(step, tokens_seen, identity, record)

    # The end: ranks must agree before the final checkpoint; then status `trained`.
    seconds = time.perf_counter() - start
    check_in_sync(model, world)
    trainer.checkpoint(tcfg.steps, tokens_seen, identity, record)
    # Throughput over this invocation, first steps (allocator warm-up) included.
    width = trainer.task.tokens_for(tcfg.length)  # train.length may count digits (arithmetic)
    done_tokens = (tcfg.steps - first_step) * tcfg.batch_size * width
    summary = {
        "final_loss": rows[-1]["loss"] if rows else math.nan,
        "tokens_per_s": done_tokens / max(seconds, 1e-9),
        "seconds": seconds,
        "parameters": meta["parameters"],
        "world_size": world.size,
    }
    record.trained(summary)
    return Trained(summary, model, trainer.task)
