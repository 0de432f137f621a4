"""The training loop: one function, read top to bottom."""

from __future__ import annotations

import logging
import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from omegaconf import DictConfig, OmegaConf
from torch.nn.parallel import DistributedDataParallel

from posx.config.build import build_model, build_positions, build_task
from posx.config.fingerprint import run_fingerprint
from posx.config.run_names import run_label
from posx.config.trust import needs_trust
from posx.errors import Interrupted, PosxError
from posx.model.transformer import TransformerLM
from posx.positions import step_positions
from posx.runtime.distributed import (
    barrier,
    check_in_sync,
    init_process_group,
    mean_over_ranks,
    pick_device,
    shard,
)
from posx.runtime.precision import autocast_context, grad_scaler
from posx.storage.checkpoint import (
    check_identity,
    checkpoint_dir,
    config_identity,
    load_checkpoint,
    load_trainer_tensors,
    save_checkpoint,
)
from posx.storage.results import SCHEMA_VERSION, write_csv, write_json
from posx.tasks.base import Task
from posx.training.losses import masked_loss
from posx.training.optim import grad_norm, lr_at, make_optimizer
from posx.training.progress import TrainProgress
from posx.version import __version__

log = logging.getLogger(__name__)


@dataclass
class Trained:
    """What :func:`train` leaves: the summary written to ``run.json`` and, so that the caller
    can evaluate without reloading the checkpoint, the trained model and its task."""

    summary: dict[str, Any]
    model: TransformerLM
    task: Task


def run_meta(
    cfg: DictConfig, run_dir: Path, names: dict[str, str], task_info: dict
) -> dict[str, Any]:
    positions = names.get("positions") or "default"
    return {
        "schema_version": SCHEMA_VERSION,
        "posx_version": __version__,
        "run": run_dir.name,
        # A non-default position strategy is part of what was trained: rope+randomized != rope.
        "encoding": run_label(names["encoding"], positions),
        "positions": positions,
        "positions_config": OmegaConf.to_container(cfg.get("positions") or {}, resolve=True),
        "task": names["task"],
        "model": names["model"],
        "seed": cfg.seed,
        "train_length": cfg.train.length,
        "steps": cfg.train.steps,
        "experiment": str(cfg.get("experiment_name") or ""),  # whose claims apply (posx check)
        "task_info": task_info,
        # the whole configuration minus seed and bookkeeping: what `posx report` groups by
        "fingerprint": run_fingerprint(run_dir, cfg),
        # What `posx eval/resume --trust` must allow to load this run (informative only: a
        # run's own files never grant trust; see posx.config.trust).
        "needs_trust": needs_trust(cfg),
    }


class StopOnInterrupt:
    """The first Ctrl-C (or SIGTERM, which SLURM sends before it kills a job) asks the loop to
    stop at the next step boundary, so the checkpoint is a consistent state; a second one
    interrupts at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> StopOnInterrupt:
        try:
            self._previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        except ValueError:  # not the main thread (some launchers): default behaviour
            self._previous = {}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def rng_states(data_rng: torch.Generator) -> dict[str, torch.Tensor]:
    states = {"torch": torch.get_rng_state(), "data": data_rng.get_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state()
    return states


def restore(
    run_dir: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    data_rng: torch.Generator,
) -> tuple[int, int, list[dict[str, Any]]]:
    """Loads the run's checkpoint; returns (step, tokens seen, metrics rows up to that step)."""
    state = load_checkpoint(run_dir, model, optimizer)
    tensors = load_trainer_tensors(run_dir)
    if "torch" not in tensors or "data" not in tensors:
        raise PosxError(f"checkpoint in {run_dir} has no RNG state; it cannot be resumed exactly")
    torch.set_rng_state(tensors["torch"])
    data_rng.set_state(tensors["data"])
    if "cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["cuda"])
    rows: list[dict[str, Any]] = []
    if (run_dir / "metrics.csv").is_file():
        old = pd.read_csv(run_dir / "metrics.csv")
        rows = old[old["step"] <= state["step"]].to_dict("records")
    return int(state["step"]), int(state["tokens"]), rows


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
    t = cfg.train
    w = init_process_group()
    if t.threads:
        torch.set_num_threads(t.threads)
    device = pick_device(t.device, w)
    torch.manual_seed(cfg.seed)
    data_rng = torch.Generator().manual_seed(cfg.seed)  # the data order depends on the seed alone

    task = build_task(cfg)
    model = build_model(cfg, task.vocab_size).to(device)
    positions = build_positions(cfg)
    positions.check(model.encoding, t.length)
    optimizer = make_optimizer(model, cfg, device)
    step, tokens_seen, rows = 0, 0, []
    if t.resume and any((run_dir / d).is_dir() for d in ("checkpoint", ".checkpoint.old")):
        checkpoint_dir(run_dir)  # a clear error if the checkpoint is incomplete
        check_identity(run_dir, cfg, "the config to resume with")
        step, tokens_seen, rows = restore(run_dir, model, optimizer, data_rng)
    ddp = DistributedDataParallel(model) if w.distributed else model
    # compiled for training only: evaluation runs other lengths, which would recompile
    forward = torch.compile(ddp) if t.compile else ddp
    scaler = grad_scaler(device, t.precision)
    meta = {**run_meta(cfg, run_dir, names, task.describe()), "parameters": model.num_parameters()}
    if w.is_main:
        write_json(
            run_dir / "run.json", {**meta, "status": "training", "resumed_from": step or None}
        )

    saved = [step or None]  # step of the checkpoint on disk (the restored one, if any)
    identity = config_identity(cfg)  # what the weights mean; loading checks it against the config

    def diverged(what: str, at: int) -> PosxError:
        """Records the failure with its step in run.json; the checkpoint on disk stays."""
        kept = (
            f"the checkpoint of step {saved[0]} is kept"
            if saved[0]
            else "no checkpoint was saved (train.checkpoint_every=N keeps one)"
        )
        message = f"{what} at step {at}; training stopped, {kept}"
        if w.is_main:
            write_json(
                run_dir / "run.json", {**meta, "status": "failed", "step": at, "error": message}
            )
        return PosxError(message)

    def checkpoint(done: int) -> None:
        # Never replace the last good checkpoint with diverged weights. Every rank checks (the
        # weights are identical), so all ranks stop together instead of hanging in a barrier.
        if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
            raise diverged("the weights became non-finite", done)
        if w.is_main:
            state = {"step": done, "tokens": tokens_seen, "identity": identity}
            save_checkpoint(run_dir, model, optimizer, state, rng_states(data_rng))
        saved[0] = done
        barrier(w)

    start = window_start = time.perf_counter()
    window_tokens, first_step = 0, step
    if w.is_main and step >= t.steps:  # `posx resume` of a run whose training is complete
        log.info(f"already trained: the checkpoint is at step {step} of {t.steps}")
    elif w.is_main:
        log.info(
            f"training {t.steps - step} steps on {device.type}"
            + (f" from step {step}" if step else "")
        )
    progress = TrainProgress(t.steps, step, bool(t.progress and w.is_main), t.progress_every)
    with progress, StopOnInterrupt() as stop:
        ddp.train()
        while step < t.steps:
            lr = lr_at(step, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch = shard(task.train_batch(t.batch_size, t.length, data_rng), w).to(device)
            with autocast_context(device, t.precision):
                pos = step_positions(positions, cfg.seed, step, t.batch_size, t.length, w)
                logits = forward(batch.inputs, pos.to(device))
            loss = masked_loss(logits, batch)
            if not torch.isfinite(loss):  # numbered as in metrics.csv: step s+1 is this batch
                raise diverged(f"loss became {loss.item()}", step + 1)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()  # fp16 only: scaled so small gradients survive
            logged = (step + 1) % t.log_every == 0 or step + 1 == t.steps
            if t.grad_clip > 0 or logged:
                scaler.unscale_(optimizer)  # the norm and the clipping see true gradients
            norm = grad_norm(model, t.grad_clip) if t.grad_clip > 0 or logged else None
            scaler.step(optimizer)
            scaler.update()
            step += 1

            tokens_seen += batch.inputs.numel() * w.size
            window_tokens += batch.inputs.numel() * w.size
            if step % t.log_every == 0 or step == t.steps:
                now = time.perf_counter()
                tps = window_tokens / max(now - window_start, 1e-9)
                window_start, window_tokens = now, 0
                rows.append(
                    {
                        "schema_version": SCHEMA_VERSION,
                        "step": step,
                        "loss": mean_over_ranks(loss, w),
                        "lr": lr,
                        "tokens": tokens_seen,
                        "tokens_per_s": tps,
                        "grad_norm": float(norm) if norm is not None else math.nan,
                        "seconds": now - start,
                    }
                )
                if w.is_main:
                    write_csv(run_dir / "metrics.csv", pd.DataFrame(rows))
                    progress.update(step, rows[-1])
                    if on_log is not None:
                        on_log(rows[-1])
            if stop.requested:
                checkpoint(step)
                if w.is_main:
                    write_json(
                        run_dir / "run.json", {**meta, "status": "interrupted", "step": step}
                    )
                resume = f"posx resume {run_dir}"
                raise Interrupted(f"interrupted at step {step}; checkpoint saved; run: {resume}")
            if t.checkpoint_every and step % t.checkpoint_every == 0 and step < t.steps:
                checkpoint(step)

    seconds = time.perf_counter() - start
    check_in_sync(model, w)
    checkpoint(t.steps)
    # Throughput over this invocation, first steps (allocator warm-up) included.
    done_tokens = (t.steps - first_step) * t.batch_size * t.length
    summary = {
        "final_loss": rows[-1]["loss"] if rows else math.nan,
        "tokens_per_s": done_tokens / max(seconds, 1e-9),
        "seconds": seconds,
        "parameters": meta["parameters"],
        "world_size": w.size,
    }
    if w.is_main:
        write_json(run_dir / "run.json", {**meta, "status": "trained", **summary})
    return Trained(summary, model, task)
