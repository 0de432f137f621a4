"""Copy: read a random string, then write it again after a separator.

Layout of one instance of size ``n`` (``2n + 2`` tokens, the last one only ever a target)::

    BOS x_1 .. x_n SEP x_1 .. x_n

Length mapping: a sequence of ``length`` input tokens holds at most ``n = (length - 1) // 2``
symbols; shorter instances are padded with PAD (never scored). Only the second copy is scored.
Training draws ``n`` uniformly from ``[min_size, max size for the length]``; evaluation uses the
largest ``n`` that fits, so longer eval lengths mean longer strings.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posx.errors import ConfigError
from posx.tasks.base import Batch, Task


class CopyTask(Task):
    """Copy a string of ``num_symbols`` possible symbols.

    Args:
        num_symbols: Alphabet size (symbols are ids ``0..num_symbols-1``).
        min_size: Smallest string length drawn in training.
    """

    exact_match = True

    def __init__(self, num_symbols: int = 16, min_size: int = 1) -> None:
        if num_symbols < 2:
            raise ConfigError(f"copy needs num_symbols >= 2, got {num_symbols}")
        if min_size < 1:
            raise ConfigError(f"copy needs min_size >= 1, got {min_size}")
        self.num_symbols, self.min_size = num_symbols, min_size
        self.pad, self.bos, self.sep = num_symbols, num_symbols + 1, num_symbols + 2
        self.vocab_size = num_symbols + 3

    def size_for(self, length: int) -> int:
        n = (length - 1) // 2
        if n < self.min_size:
            raise ConfigError(f"copy needs length >= {2 * self.min_size + 1}, got {length}")
        return n

    def make(self, sizes: Tensor, length: int, generator: torch.Generator) -> Batch:
        """Instances with string lengths ``sizes [b]`` padded to ``length`` input tokens."""
        b, n_max = len(sizes), int(sizes.max())
        symbols = torch.randint(self.num_symbols, (b, n_max), generator=generator)
        idx = torch.arange(length + 1).expand(b, -1)
        n = sizes.unsqueeze(1)
        first = (idx >= 1) & (idx <= n)
        second = (idx >= n + 2) & (idx <= 2 * n + 1)
        src = torch.where(first, idx - 1, idx - n - 2).clamp(0, n_max - 1)
        seq = torch.where(first | second, symbols.gather(1, src), self.pad)
        seq[:, 0] = self.bos
        seq.scatter_(1, n + 1, self.sep)
        return Batch(seq[:, :-1], seq[:, 1:], second[:, 1:])

    def train_batch(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        top = self.size_for(length)
        sizes = torch.randint(self.min_size, top + 1, (batch_size,), generator=generator)
        return self.make(sizes, length, generator)

    def eval_set(self, length: int, num_sequences: int, seed: int) -> Batch:
        generator = torch.Generator().manual_seed(seed * 1_000_003 + length)
        sizes = torch.full((num_sequences,), self.size_for(length))
        return self.make(sizes, length, generator)

    def describe(self) -> dict[str, object]:
        return {"length_mapping": "string size n = (length - 1) // 2", "vocab": self.vocab_size}
