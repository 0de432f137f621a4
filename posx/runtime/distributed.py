"""Multi-process training under torchrun: one process group, rank 0 writes, batches sharded.

Every rank draws the same global batch from the same seeded generator and keeps its own rows,
so the data order, and with DDP's gradient averaging the update, match a single process that
trains on the whole global batch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from posx.errors import ConfigError, PosxError
from posx.tasks.base import Batch


@dataclass(frozen=True)
class World:
    """This process's place among the training processes."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def world() -> World:
    """Ranks from torchrun's environment (a single process when absent)."""
    env = os.environ
    return World(
        int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1)), int(env.get("LOCAL_RANK", 0))
    )


def init_process_group() -> World:
    """Joins the process group torchrun set up (gloo on CPU, nccl on GPU); idempotent."""
    w = world()
    if w.distributed and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(w.local_rank)
        dist.init_process_group(backend=backend)
    return w


def pick_device(name: str, w: World | None = None) -> torch.device:
    """``auto`` (this rank's GPU if there is one, else the CPU), ``cpu``, ``cuda[:N]``, ``mps``."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", w.local_rank if w else 0)
        return torch.device("cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"train.device={name} but CUDA is not available on this machine; use "
            "train.device=cpu (or auto)"
        )
    return torch.device(name)


def broadcast_from_main(value: str, w: World) -> str:
    """Rank 0's ``value`` on every rank (e.g. the invocation id that names the run directory)."""
    if not w.distributed:
        return value
    values = [value]
    dist.broadcast_object_list(values, src=0)
    return str(values[0])


def shard(batch: Batch, w: World) -> Batch:
    """This rank's rows of the global batch."""
    if not w.distributed:
        return batch
    if len(batch) % w.size:
        raise ConfigError(
            f"train.batch_size ({len(batch)}) must be divisible by the {w.size} processes"
        )
    per = len(batch) // w.size
    return batch[w.rank * per : (w.rank + 1) * per]


def mean_over_ranks(value: torch.Tensor, w: World) -> float:
    """The value averaged across ranks (for logging the global batch's loss)."""
    if not w.distributed:
        return value.item()
    value = value.detach().clone()
    dist.all_reduce(
        value, op=dist.ReduceOp.AVG if dist.get_backend() == "nccl" else dist.ReduceOp.SUM
    )
    return value.item() if dist.get_backend() == "nccl" else value.item() / w.size


def check_in_sync(model: torch.nn.Module, w: World) -> None:
    """Raises when ranks ended with different parameters (a broken all-reduce)."""
    if not w.distributed:
        return
    flat = torch.cat([p.detach().float().flatten() for p in model.parameters()])
    local = torch.stack([flat.sum(), (flat * flat).sum()])
    gathered = [torch.zeros_like(local) for _ in range(w.size)]
    dist.all_gather(gathered, local)
    if any(not torch.equal(g, gathered[0]) for g in gathered):
        raise PosxError("parameters differ across ranks after training")


def barrier(w: World) -> None:
    """Waits until every rank reaches this point; does nothing in a single process."""
    if w.distributed:
        dist.barrier()


def leave(w: World) -> None:
    """Every rank is done with the others: waits for them, then leaves the process group (a
    later :func:`init_process_group` joins a new one).

    A process that exits with its gloo group still open can abort on the way out ("terminate
    called without an active exception": the group's threads are torn down while in use), and
    torchrun then reports a failure after the work succeeded. Does nothing in a single process.
    """
    if w.distributed and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
