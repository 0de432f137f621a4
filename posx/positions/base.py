"""The position strategy's interface, and ``default``: positions ``0..length-1`` everywhere."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from posx.encodings.base import PositionalEncoding
from posx.encodings.structure import TokenStructure
from posx.errors import ConfigError, PosxError


class PositionStrategy:
    """``default``: positions ``0..length-1`` everywhere."""

    name = "default"
    #: Positions come from the task's token structure (:meth:`structured`), not the length.
    needs_structure = False

    def structured(
        self, structure: TokenStructure, generator: torch.Generator, training: bool
    ) -> Tensor:
        """Positions ``[b, s]`` from a task's per-token structure (strategies that declare
        ``needs_structure``); ``training`` draws the random training offsets from
        ``generator``, evaluation uses none.

        Raises:
            PosxError: The strategy does not use structure.
        """
        raise PosxError(f"positions={self.name} does not read the task's structure")

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

    def check(self, encoding: PositionalEncoding, train_length: int, longest: int) -> None:
        """Raises :class:`ConfigError` when the strategy cannot train with ``encoding``.

        Args:
            encoding: The model's encoding.
            train_length: ``train.length`` in the task's unit.
            longest: Digits of the longest number a training sequence holds
                (:meth:`posx.tasks.base.Task.longest_number`); what structured IDs count.
        """
        top = self.max_position
        if top is None:
            return
        if top < train_length:
            raise ConfigError(
                f"positions={self.name} needs its largest position ({top}) >= train.length "
                f"({train_length})"
            )
        self.check_table(encoding, top)

    def positions_needed(self, tokens: int, longest: int, training: bool = True) -> int:
        """Positions ``0 .. n-1`` a sequence of ``tokens`` tokens reaches, whose longest number
        has ``longest`` digits: the size a learned table needs. Here the tokens; a structured
        strategy counts the IDs it gives the numbers instead.

        Args:
            tokens: Tokens per sequence.
            longest: Digits of the sequence's longest number (:meth:`Task.longest_number`).
            training: Training (random offsets) or evaluation (the fixed one).
        """
        return tokens

    def eval_reason(self, encoding: PositionalEncoding, window: int, longest: int) -> str | None:
        """Why evaluation cannot run with ``window`` tokens at once, whose longest number has
        ``longest`` digits, or ``None``: the encoding checked against the positions this
        strategy gives them (:meth:`positions_needed`), not against the token count."""
        needed = self.positions_needed(window, longest, training=False)
        return encoding.unsupported_reason(needed) or self.unsupported_reason(window)

    def check_table(self, encoding: PositionalEncoding, top: int) -> None:
        """Raises :class:`ConfigError` when training positions reach ``top - 1`` but
        ``encoding`` has fewer positions (its ``max_len``)."""
        limit = encoding.max_len
        if limit is not None and limit < top:
            raise ConfigError(
                f"positions={self.name} trains positions up to {top - 1} but "
                f"{type(encoding).__name__} has only {limit} (set encoding.max_len={top})"
            )

    def describe(self) -> dict[str, object]:
        return {"name": self.name}


DefaultPositions = PositionStrategy
