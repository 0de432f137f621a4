"""Training-time position strategies: they change only the ``pos`` tensor the model receives.

- ``default``: ``pos = arange(length)`` in training and evaluation.
- ``randomized`` (Ruoss et al. 2023, "Randomized Positional Encodings Boost Length
  Generalization of Transformers"): each training sequence gets ``length`` positions sampled
  without replacement from ``[0, max_pos)`` and sorted, so the model sees positions up to
  ``max_pos`` while training on short sequences; optionally the same at evaluation.
- ``pose`` (Zhu et al. 2023, "PoSE: Efficient Context Window Extension of LLMs via Positional
  Skip-wise Training"): the training window is cut into ``chunks`` contiguous pieces at random
  points; chunk ``c > 0`` is shifted by an offset ``u_c`` drawn from ``[u_{c-1}, target_length -
  length]`` (non-decreasing, as in the paper), so positions stay increasing and cover
  ``[0, target_length)``. Evaluation uses ``arange``.

Every strategy samples per sequence (``[b, s]`` positions) from the generator it is given, so a
run is reproducible from its seed.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from posx.encodings.base import PositionalEncoding
from posx.errors import ConfigError, PosxError


class PositionStrategy:
    """``default``: positions ``0..length-1`` everywhere."""

    name = "default"

    def train_positions(self, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
        """Positions for one training batch: ``[length]`` or ``[batch_size, length]`` (CPU)."""
        return torch.arange(length)

    def eval_positions(self, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
        """Positions for one evaluation batch: ``[length]`` or ``[batch_size, length]`` (CPU)."""
        return torch.arange(length)

    @property
    def max_position(self) -> int | None:
        """Largest position + 1 that training can produce beyond ``train.length`` (or None)."""
        return None

    def unsupported_reason(self, width: int) -> str | None:
        """Why evaluation cannot give positions to ``width`` tokens at once, or ``None``."""
        return None

    def evaluator(self, seed: int) -> Callable[[int, int], Tensor] | None:
        """``(rows, width) -> positions`` for one eval length's forward passes, drawn from a
        generator seeded by ``seed`` (the same for every run); ``None`` means ``arange``."""
        if type(self).eval_positions is PositionStrategy.eval_positions:
            return None
        generator = torch.Generator().manual_seed(seed)
        return lambda rows, width: self.eval_positions(rows, width, generator)

    def check(self, encoding: PositionalEncoding, train_length: int) -> None:
        """Raises :class:`ConfigError` when the strategy cannot train with ``encoding``."""
        top = self.max_position
        if top is None:
            return
        if top < train_length:
            raise ConfigError(
                f"positions={self.name} needs its largest position ({top}) >= train.length "
                f"({train_length})"
            )
        limit = encoding.max_len
        if limit is not None and limit < top:
            raise ConfigError(
                f"positions={self.name} trains positions up to {top - 1} but "
                f"{type(encoding).__name__} has only {limit} (set encoding.max_len={top})"
            )

    def describe(self) -> dict[str, object]:
        return {"name": self.name}


DefaultPositions = PositionStrategy


def randomized_positions(
    batch_size: int, length: int, max_pos: int, generator: torch.Generator
) -> Tensor:
    """``length`` sorted distinct positions from ``[0, max_pos)`` per row: ``[b, length]``."""
    if length > max_pos:
        raise PosxError(f"cannot draw {length} distinct positions from [0, {max_pos})")
    keys = torch.rand(batch_size, max_pos, generator=generator)
    return keys.argsort(dim=-1)[:, :length].sort(dim=-1).values


class RandomizedPositions(PositionStrategy):
    """Ruoss et al.'s randomized positions.

    Args:
        max_pos: Positions are drawn from ``[0, max_pos)``; should exceed every eval length.
        at_eval: Also sample positions at evaluation (seeded by ``eval.seed``); else ``arange``.
    """

    name = "randomized"

    def __init__(self, max_pos: int = 1024, at_eval: bool = False) -> None:
        if max_pos <= 0:
            raise ConfigError(f"positions.max_pos must be positive, got {max_pos}")
        self.max_pos, self.at_eval = max_pos, at_eval

    @property
    def max_position(self) -> int | None:
        return self.max_pos

    def train_positions(self, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
        return randomized_positions(batch_size, length, self.max_pos, generator)

    def evaluator(self, seed: int) -> Callable[[int, int], Tensor] | None:
        return super().evaluator(seed) if self.at_eval else None

    def unsupported_reason(self, width: int) -> str | None:
        if self.at_eval and width > self.max_pos:
            return f"randomized positions at eval draw from [0, {self.max_pos}); asked for {width}"
        return None

    def eval_positions(self, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
        if not self.at_eval:
            return torch.arange(length)
        return randomized_positions(batch_size, length, self.max_pos, generator)

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "max_pos": self.max_pos, "at_eval": self.at_eval}


def pose_positions(
    batch_size: int, length: int, target_length: int, chunks: int, generator: torch.Generator
) -> Tensor:
    """PoSE positions ``[b, length]``: ``chunks`` pieces, later ones skipped forward.

    Chunk boundaries are ``chunks - 1`` distinct cut points drawn from ``[1, length)``; chunk
    ``c`` keeps its indices and adds ``u_c`` (``u_0 = 0``, ``u_c`` uniform in
    ``[u_{c-1}, target_length - length]``), so the last position is ``< target_length``.
    """
    chunks = min(chunks, length)
    skip = target_length - length
    cuts = torch.rand(batch_size, length - 1, generator=generator).argsort(-1)[:, : chunks - 1]
    cuts = cuts.sort(-1).values + 1  # [b, chunks - 1] in [1, length)
    chunk_of = torch.zeros(batch_size, length, dtype=torch.long)
    chunk_of.scatter_add_(1, cuts, torch.ones_like(cuts))
    chunk_of = chunk_of.cumsum(-1)  # chunk id of each token
    offsets = torch.zeros(batch_size, chunks, dtype=torch.long)
    for c in range(1, chunks):
        lo = offsets[:, c - 1]
        span = (skip - lo + 1).float()
        offsets[:, c] = lo + (torch.rand(batch_size, generator=generator) * span).long()
    return torch.arange(length) + offsets.gather(1, chunk_of)


class PoSEPositions(PositionStrategy):
    """Zhu et al.'s positional skip-wise training.

    Args:
        target_length: The context length to emulate (positions reach ``target_length - 1``).
        chunks: Number of chunks the training window is cut into (2 in the paper).
    """

    name = "pose"

    def __init__(self, target_length: int = 512, chunks: int = 2) -> None:
        if chunks < 1:
            raise ConfigError(f"positions.chunks must be >= 1, got {chunks}")
        if target_length <= 0:
            raise ConfigError(f"positions.target_length must be positive, got {target_length}")
        self.target_length, self.chunks = target_length, chunks

    @property
    def max_position(self) -> int | None:
        return self.target_length

    def train_positions(self, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
        if length > self.target_length:
            raise PosxError(
                f"PoSE target_length {self.target_length} is below the window length {length}"
            )
        return pose_positions(batch_size, length, self.target_length, self.chunks, generator)

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "target_length": self.target_length, "chunks": self.chunks}


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
