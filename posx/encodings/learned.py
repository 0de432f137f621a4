"""Learned absolute position embeddings (GPT-2, BERT): one trained vector per position."""

from __future__ import annotations

from torch import Tensor, nn

from posx.encodings.base import PositionalEncoding


class Learned(PositionalEncoding):
    """A table of ``max_len`` trained vectors added to token embeddings.

    Positions past ``max_len`` have no vector: the evaluator reports them as unsupported.

    Args:
        d_model: Model width.
        max_len: Number of positions in the table (usually the training length).
    """

    def __init__(self, d_model: int, max_len: int) -> None:
        super().__init__()
        if max_len <= 0:
            raise ValueError(f"learned encoding needs max_len > 0, got {max_len}")
        self.max_len = max_len
        self.table = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.table.weight, std=0.02)

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        if pos.is_floating_point():
            raise ValueError("learned positions must be integers, got float positions")
        top = int(pos.max())
        if top >= self.max_len:
            raise ValueError(f"position {top} is past the learned table's {self.max_len} rows")
        return x + self.table(pos)
