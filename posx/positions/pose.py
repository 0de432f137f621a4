"""``pose`` (Zhu et al. 2023): the training window cut into chunks, later ones skipped forward."""

from __future__ import annotations

import torch
from torch import Tensor

from posx.errors import ConfigError, PosxError
from posx.positions.base import PositionStrategy


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
