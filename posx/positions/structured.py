"""Strategies that read the task's per-token structure: ``coupling`` (Cho et al. 2024) and
``abacus`` (McLeish et al. 2024)."""

from __future__ import annotations

import torch
from torch import Tensor

from posx.encodings.base import PositionalEncoding
from posx.encodings.structure import TokenStructure
from posx.errors import ConfigError, PosxError
from posx.positions.base import PositionStrategy


class StructuredPositions(PositionStrategy):
    """Base of the strategies that read the task's structure.

    Args:
        max_offset: Training offsets are uniform in ``[0, max_offset]`` per sequence, so
            positions past the training digits are trained too.
        eval_offset: The offset of every evaluation sequence (the papers: 0). Offset 0 puts a
            number's first digits at the IDs only the smallest training offsets reach; a
            small model may leave them undertrained (docs/reproductions.md, arithmetic).
    """

    needs_structure = True
    #: How far the strategy moves a number's IDs past its digits' significances: coupling
    #: shifts the answer by one (the token predicting a digit carries that digit's ID).
    answer_shift = 0

    def __init__(self, max_offset: int = 32, eval_offset: int = 0) -> None:
        if max_offset < 0:
            raise ConfigError(f"positions.max_offset must be >= 0, got {max_offset}")
        if not 0 <= eval_offset <= max_offset:
            raise ConfigError(
                f"positions.eval_offset must be in [0, max_offset={max_offset}], got {eval_offset}"
            )
        self.max_offset, self.eval_offset = max_offset, eval_offset

    def offsets(self, rows: int, generator: torch.Generator, training: bool) -> Tensor:
        """``[rows, 1]`` per-sequence offsets: uniform in ``[0, max_offset]`` in training,
        ``eval_offset`` otherwise."""
        if not training or self.max_offset == 0:
            return torch.full((rows, 1), self.eval_offset, dtype=torch.long)
        return torch.randint(self.max_offset + 1, (rows, 1), generator=generator)

    def train_positions(self, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
        raise PosxError(f"positions={self.name} needs the task's structure, not only a length")

    def ids_needed(self, longest: int, offset: int) -> int:
        """IDs ``0 .. offset + longest + answer_shift``: 0 for tokens outside every number, and
        a digit of significance ``j`` (``0 .. longest - 1``) gets ``offset + 1 + j``."""
        return offset + longest + self.answer_shift + 1

    def check(self, encoding: PositionalEncoding, train_length: int, longest: int) -> None:
        """Training IDs reach the longest number's top digit at the largest offset; an
        encoding with fewer positions must say so."""
        self.check_table(encoding, self.ids_needed(longest, self.max_offset))

    def positions_needed(self, tokens: int, longest: int, training: bool = True) -> int:
        """The IDs (:meth:`ids_needed`) whatever the token count, at ``max_offset`` in
        training and ``eval_offset`` at evaluation."""
        return self.ids_needed(longest, self.max_offset if training else self.eval_offset)

    def eval_reason(self, encoding: PositionalEncoding, window: int, longest: int) -> str | None:
        """As :meth:`PositionStrategy.eval_reason`, naming the IDs the numbers need."""
        needed = self.positions_needed(window, longest, training=False)
        reason = encoding.unsupported_reason(needed)
        if reason:
            ids = f"IDs up to {needed - 1}"
            return f"positions={self.name} gives {longest}-digit numbers {ids}: {reason}"
        return self.unsupported_reason(window)

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "max_offset": self.max_offset, "eval_offset": self.eval_offset}


class CoupledPositions(StructuredPositions):
    """Cho et al.'s position coupling for tasks written least-significant digit first.

    A digit of significance ``j`` gets ID ``o + 1 + j`` in every operand; the answer is shifted
    by one so that the token *predicting* the answer digit of significance ``j`` (the answer
    start for ``j = 0``, else the answer digit ``j - 1``) has ID ``o + 1 + j``, the ID of the
    operand digits it needs. Every other token (BOS, operators, padding) gets ID 0. ``o`` is the
    random training offset.

    ``max_offset`` and ``eval_offset`` as in :class:`StructuredPositions` (the paper samples
    the start ID at random in training and starts at 0 at evaluation).
    """

    name = "coupling"
    answer_shift = 1

    def structured(
        self, structure: TokenStructure, generator: torch.Generator, training: bool
    ) -> Tensor:
        sig = structure.significance + structure.in_answer.long()
        shared = (structure.role != TokenStructure.ROLE_OTHER) & (
            structure.role != TokenStructure.ROLE_OPERATOR
        )
        offset = self.offsets(sig.shape[0], generator, training)
        return torch.where(shared, offset + 1 + sig, 0)


class AbacusPositions(StructuredPositions):
    """McLeish et al.'s Abacus indices: ``1 + significance + o`` for digits, 0 elsewhere.

    ``max_offset`` and ``eval_offset`` as in :class:`StructuredPositions` (the paper: training
    offsets up to ``k = 100`` for 20-digit training, none at evaluation).
    """

    name = "abacus"

    def structured(
        self, structure: TokenStructure, generator: torch.Generator, training: bool
    ) -> Tensor:
        offset = self.offsets(structure.role.shape[0], generator, training)
        return torch.where(structure.is_digit, offset + 1 + structure.significance, 0)

    def positions_needed(self, tokens: int, longest: int, training: bool = True) -> int:
        """As :meth:`StructuredPositions.positions_needed`; in training one row more: the size
        a learned table read through Abacus indices was saved with before IDs were counted
        exactly (its checkpoints keep loading)."""
        return super().positions_needed(tokens, longest, training) + int(training)

    def check(self, encoding: PositionalEncoding, train_length: int, longest: int) -> None:
        """As :meth:`StructuredPositions.check`, and the Abacus table's rows when it has one."""
        super().check(encoding, train_length, longest)
        rows = getattr(encoding, "max_index", None)  # the Abacus table bounds indices, not length
        top = self.ids_needed(longest, self.max_offset)
        if rows is not None and rows < top:
            raise ConfigError(
                f"positions=abacus trains indices up to {top - 1} but the table has {rows}"
                f" rows (set encoding.max_index={top} or lower positions.max_offset)"
            )
