"""A training step's positions, seeded from ``(seed, step)`` alone and split over processes."""

from __future__ import annotations

import torch
from torch import Tensor

from posx.encodings.structure import TokenStructure
from posx.positions.base import PositionStrategy


def step_positions(
    strategy: PositionStrategy,
    seed: int,
    step: int,
    batch_size: int,
    length: int,
    world: object | None = None,
) -> Tensor:
    """Training positions of step ``step`` for this process's rows of the global batch.

    The generator is seeded from ``(seed, step)`` alone, so positions do not disturb the data
    order (``rope`` and ``rope+randomized`` see the same batches) and a resumed run draws the
    same positions without saving any generator state.

    Args:
        strategy: The run's position strategy.
        seed: The run's seed.
        step: Zero-based optimizer step.
        batch_size: Global batch size (all processes).
        length: Training length.
        world: ``posx.runtime.distributed.World`` (``rank``, ``size``) or ``None`` for one process.

    Returns:
        ``[length]`` or ``[rows, length]`` positions on the CPU.
    """
    generator = torch.Generator().manual_seed((seed * 1_000_003 + step) % 2**62)
    pos = strategy.train_positions(batch_size, length, generator)
    size = getattr(world, "size", 1)
    if pos.dim() == 2 and size > 1:
        per = batch_size // size
        rank = getattr(world, "rank", 0)
        pos = pos[rank * per : (rank + 1) * per]
    return pos


def structured_step_positions(
    strategy: PositionStrategy,
    structure: TokenStructure,
    seed: int,
    step: int,
    world: object | None = None,
) -> Tensor:
    """Training positions ``[rows, s]`` of step ``step`` from this process's rows' structure.

    Seeded from ``(seed, step)`` like :func:`step_positions`; offsets are drawn for the global
    batch (every process's rows) and this process keeps its own, so a run's positions do not
    depend on how many processes train it.
    """
    generator = torch.Generator().manual_seed((seed * 1_000_003 + step) % 2**62)
    size, rank = getattr(world, "size", 1), getattr(world, "rank", 0)
    rows = structure.role.shape[0]
    whole = TokenStructure(
        *(t.repeat(size, 1) for t in (structure.number, structure.significance, structure.role))
    )
    pos = strategy.structured(whole, generator, training=True)
    return pos[rank * rows : (rank + 1) * rows]
