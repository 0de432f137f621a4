"""``randomized`` (Ruoss et al. 2023): sorted distinct positions drawn from ``[0, max_pos)``."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from posx.errors import ConfigError, PosxError
from posx.positions.base import PositionStrategy


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
