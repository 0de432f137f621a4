"""The Task contract: seeded batches of token ids with a loss mask, for any sequence length."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch
from torch import Tensor

from posx.encodings.structure import TokenStructure

__all__ = ["Batch", "Task", "TokenStructure"]


@dataclass
class Batch:
    """Inputs and next-token targets; ``mask`` marks the targets that are scored.

    Attributes:
        inputs: Token ids ``[b, s]``.
        targets: Token ids ``[b, s]`` (``inputs`` shifted by one).
        mask: Bool ``[b, s]``; True where the target counts for loss and metrics.
    """

    inputs: Tensor
    targets: Tensor
    mask: Tensor

    def to(self, device: torch.device | str) -> Batch:
        return Batch(self.inputs.to(device), self.targets.to(device), self.mask.to(device))

    def __len__(self) -> int:
        return self.inputs.shape[0]

    def __getitem__(self, rows: slice) -> Batch:
        return Batch(self.inputs[rows], self.targets[rows], self.mask[rows])


class Task(ABC):
    """A source of training and evaluation sequences.

    ``length`` always counts input tokens. Subclasses set ``vocab_size``; ``exact_match`` says
    whether a sequence has one right answer (synthetic tasks), and a text task's
    :meth:`text_bytes` turns loss into bits per byte.
    """

    vocab_size: int
    exact_match: bool = False
    #: What ``length`` counts for this task (``tokens``; ``digits`` for arithmetic, whose
    #: ``train.length`` and ``eval.lengths`` are operand digits). Reports label axes with it.
    length_unit: str = "tokens"
    #: Whether :meth:`structure` reads numbers from the tokens (a digit's place in its number):
    #: what the structured position strategies (coupling, Abacus) are for. Training refuses
    #: them on a task without it, whose tokens would get plain positions under their label.
    has_structure: bool = False

    def tokens_for(self, length: int) -> int:
        """Tokens per sequence at ``length`` (in :attr:`length_unit`); ``length`` itself for a
        task whose unit is tokens."""
        return length

    def longest_number(self, length: int) -> int:
        """Digits of the longest number (operand or answer) an instance at ``length`` holds: the
        significances :meth:`structure` reports run over ``0 .. longest_number - 1``, so a
        structured position strategy knows the IDs an evaluation at ``length`` needs. The
        default structure is one number of :meth:`tokens_for` tokens."""
        return self.tokens_for(length)

    def structure(self, inputs: Tensor) -> TokenStructure:
        """Per-token structure of ``inputs [b, s]``: which number, significance, role.

        Tasks with numbers (arithmetic, :attr:`has_structure`) read it from the tokens; the
        default treats each sequence as one number of ``s`` digits
        (:meth:`TokenStructure.plain`).
        """
        return TokenStructure.plain(inputs)

    @abstractmethod
    def train_batch(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        """A random training batch of ``batch_size`` sequences of ``length`` tokens."""

    @abstractmethod
    def eval_set(self, length: int, num_sequences: int, seed: int) -> Batch:
        """Fixed held-out sequences: identical for every run given ``(length, seed)``."""

    def text_bytes(self, data: Batch) -> int | None:
        """Bytes of text the scored targets of ``data`` (``[n, s]`` tensors) stand for; ``None``
        where tokens are not text. Bits per byte = total nats / ln 2 / this."""
        return None

    def describe(self) -> dict[str, object]:
        """Facts about the data worth recording with a run (corpus size, length mapping)."""
        return {}

    def chance(self, data: Batch) -> float:
        """Exact match a guess that ignores the prompt scores on ``data`` (``[n, s]`` tensors).

        The report measures exact match above this level and calls a run that scores no more
        than it unlearned. 0.0 by default (answers too many to guess).
        """
        return 0.0

    def sequence_metrics(self, data: Batch, correct: Tensor) -> dict[str, float]:
        """Extra per-length metrics from per-sequence exact match (e.g. accuracy by depth).

        The evaluator calls this once per eval length with the whole eval set.

        Args:
            data: The eval set returned by :meth:`eval_set`, ``[n, s]`` tensors.
            correct: Bool ``[n]``; True where sequence ``i`` of ``data`` is an exact match.

        Returns:
            Column name -> value, appended to the eval row; empty by default.
        """
        return {}
