"""The fine-tuning loop of a pretrained model's extension, and its sharded checkpoints.

A step reads the global batch of ``train.batch_size`` windows
(:meth:`posx.pretrained.extend.data.TrainingText.batch`); each process takes its rows and runs
them ``train.micro_batch`` at a time, accumulating gradients; the loss is normalised by the
tokens of the process's rows, and FSDP averages the gradients over processes, so the update is
the global batch's mean loss, as one process would compute it. AdamW (β 0.9, 0.95, no weight
decay), a linear warmup to ``extend.lr`` then constant, gradients clipped to
``train.grad_clip``. Dropout draws from a generator seeded by ``(seed, step)``, so a resumed run
takes the steps an uninterrupted one would.

Checkpoints (``train_state/``) are :mod:`torch.distributed.checkpoint` directories: every
process writes its shards of the weights and the optimizer state, and ``trainer.json`` (the step
and the loss rows) is written last, so a directory without it is incomplete and never read.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from posx.errors import PosxError, one_line
from posx.pretrained.extend.data import TrainingText, positions
from posx.pretrained.extend.engine import Engine
from posx.runtime.distributed import barrier, mean_over_ranks
from posx.runtime.outcomes import together
from posx.storage.atomic import atomic_write
from posx.training.resume import StopOnInterrupt

STATE_DIR = "train_state"
TRAINER = "trainer.json"


@dataclass(frozen=True)
class Budget:
    """How the model is fine-tuned.

    Attributes:
        steps: Optimizer steps.
        lr: Peak learning rate.
        warmup: Warmup steps.
        batch: Windows per step, over all processes.
        micro: Windows per forward pass and process.
        length: Window length in tokens.
        target: Length PoSE's positions spread over.
        pose_chunks: PoSE's chunks (0: positions ``0..length-1``).
        grad_clip: Gradient norm limit (0: none).
        checkpoint_every: Steps between checkpoints.
        seed: Data order and dropout.
    """

    steps: int
    lr: float
    warmup: int
    batch: int
    micro: int
    length: int
    target: int
    pose_chunks: int
    grad_clip: float
    checkpoint_every: int
    seed: int

    def lr_at(self, step: int) -> float:
        """Learning rate of step ``step`` (0-based): linear warmup, then constant."""
        return self.lr * min(1.0, (step + 1) / self.warmup) if self.warmup else self.lr


class Stopped(Exception):  # noqa: N818 - a signal, not an error
    """Ctrl-C (or SIGTERM) stopped training at a step boundary; the state is saved."""

    def __init__(self, step: int) -> None:
        super().__init__(f"stopped at step {step}")
        self.step = step


def make_optimizer(engine: Engine, budget: Budget) -> torch.optim.Optimizer:
    """AdamW over the engine's parameters."""
    params = [p for p in engine.loss.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=budget.lr, betas=(0.9, 0.95), weight_decay=0.0)


def train(
    engine: Engine,
    optimizer: torch.optim.Optimizer,
    text: TrainingText,
    budget: Budget,
    state_dir: Path,
    start: int = 0,
    rows: list[dict[str, Any]] | None = None,
    on_step: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Fine-tunes from step ``start`` to ``budget.steps``.

    Args:
        engine: The model.
        optimizer: Its optimizer (restored when resuming).
        text: The held-in text.
        budget: The schedule.
        state_dir: Where checkpoints go.
        start: Steps already taken.
        rows: Their loss rows.
        on_step: Called with each step's row.

    Returns:
        One row per step: ``step``, ``loss``, ``lr``, ``tokens_per_s``, ``seconds``.

    Raises:
        Stopped: Interrupted; the state of the last finished step is saved.
    """
    rows = list(rows or [])
    w = engine.world
    per = budget.batch // w.size
    mine = slice(w.rank * per, (w.rank + 1) * per)
    with StopOnInterrupt() as stop:
        for step in range(start, budget.steps):
            if stop.requested:
                save_state(state_dir, engine, optimizer, step, rows)
                raise Stopped(step)
            began = time.perf_counter()
            loss = _step(engine, optimizer, text, budget, step, mine)
            seconds = time.perf_counter() - began
            row = {"step": step + 1, "loss": mean_over_ranks(loss, w), "lr": budget.lr_at(step),
                   "tokens_per_s": budget.batch * budget.length / seconds,
                   "seconds": seconds}  # fmt: skip
            rows.append(row)
            if on_step is not None:
                on_step(row)
            if (step + 1) % budget.checkpoint_every == 0 and step + 1 < budget.steps:
                save_state(state_dir, engine, optimizer, step + 1, rows)
    return rows


def _step(
    engine: Engine,
    optimizer: torch.optim.Optimizer,
    text: TrainingText,
    budget: Budget,
    step: int,
    mine: slice,
) -> torch.Tensor:
    """One optimizer step on this process's rows ``mine`` of the global batch; its mean loss."""
    torch.manual_seed(budget.seed * 1_000_003 + step)
    ids = text.batch(step, budget.batch, budget.length, budget.seed)[mine]
    pos = positions(step, budget.batch, budget.length, budget.target, budget.pose_chunks,
                    budget.seed)[mine]  # fmt: skip
    for group in optimizer.param_groups:
        group["lr"] = budget.lr_at(step)
    tokens = ids.shape[0] * (ids.shape[1] - 1)
    total = torch.zeros((), dtype=torch.float64)
    chunks = range(0, len(ids), budget.micro)
    for i, at in enumerate(chunks):
        engine.sync_gradients(i == len(chunks) - 1)
        part = slice(at, at + budget.micro)
        loss = engine(ids[part], pos[part]) / tokens
        loss.backward()
        total += loss.detach().double().cpu()
    if budget.grad_clip:
        torch.nn.utils.clip_grad_norm_(
            [p for p in engine.loss.parameters() if p.grad is not None], budget.grad_clip
        )
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return total.float()


def save_state(
    state_dir: Path, engine: Engine, optimizer: torch.optim.Optimizer, step: int, rows: list
) -> None:
    """Writes the sharded checkpoint of step ``step`` (every process takes part), then drops the
    older ones."""
    model, optim = get_state_dict(engine.loss, optimizer)
    target = state_dir / f"step_{step:08d}"
    # rank 0's file work between the collectives: its error is every process's, not a wait
    with together(engine.world):
        if engine.world.is_main and target.exists():
            shutil.rmtree(target)
    with _one_process_quietly():
        dcp.save({"model": model, "optim": optim}, checkpoint_id=str(target))
    barrier(engine.world)
    with together(engine.world):
        if engine.world.is_main:
            atomic_write(target / TRAINER, json.dumps({"step": step, "rows": rows}))
            for old in state_dir.glob("step_*"):
                if old != target:
                    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def _one_process_quietly() -> Iterator[None]:
    """DCP without a process group warns that it assumes one process: that is the plan here,
    not news for the user (it printed twice per run)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def latest_state(state_dir: Path) -> Path | None:
    """The newest complete checkpoint directory (one with ``trainer.json``), else None."""
    done = sorted(p for p in state_dir.glob("step_*") if (p / TRAINER).is_file())
    return done[-1] if done else None


def load_state(
    path: Path, engine: Engine, optimizer: torch.optim.Optimizer
) -> tuple[int, list[dict[str, Any]]]:
    """Restores the weights and optimizer state of checkpoint ``path`` (into any number of
    processes); returns its step and loss rows.

    Raises:
        PosxError: A damaged checkpoint, naming it.
    """
    try:
        trainer = json.loads((path / TRAINER).read_text())
        step, rows = int(trainer["step"]), list(trainer["rows"])
        model, optim = get_state_dict(engine.loss, optimizer)
        state = {"model": model, "optim": optim}
        with _one_process_quietly():
            dcp.load(state, checkpoint_id=str(path))
    except (Exception, CheckpointException) as err:  # noqa: BLE001 - JSON, shards, shapes
        # DCP's CheckpointException is a BaseException holding each rank's own error
        why = next(iter(getattr(err, "failures", {}).values()), err)
        raise PosxError(
            f"{path} is damaged ({one_line(why)}); move {path.parent} aside to start the "
            "extension again"
        ) from err
    set_state_dict(engine.loss, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])  # fmt: skip
    return step, rows
