"""Sort: read a list of numbers, write it in ascending order.

Single-digit (``digits: 1``, the default) is Deletang et al.'s bucket sort over an alphabet of
``num_symbols`` symbols; ``digits > 1`` writes each number as ``digits`` base-``num_symbols``
digits (zero-padded, so numeric and lexicographic order agree) with a comma between numbers.
Layout for ``n`` numbers, e.g. ``digits: 2``::

    BOS 3 1 , 0 7 , 1 2 SEP 0 7 , 1 2 , 3 1

Length mapping: ``digits = 1``: ``n = (length - 1) // 2`` numbers; ``digits = d > 1``:
``n = (length + 1) // (2 (d + 1))`` numbers (each item ``d`` digits plus a comma, the last comma
dropped, on both sides of SEP). Only the sorted list is scored.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posx.errors import ConfigError
from posx.tasks.synthetic.common import Instances, SyntheticTask, digits_of, join_items


class SortTask(SyntheticTask):
    """Sort ``n`` numbers of ``digits`` base-``num_symbols`` digits.

    Args:
        num_symbols: Digit alphabet (the base); ids ``0 .. num_symbols - 1``.
        digits: Digits per number; above 1 a comma (id ``num_symbols``) separates numbers.
        min_size: Fewest numbers drawn in training.
    """

    def __init__(self, num_symbols: int = 10, digits: int = 1, min_size: int = 1) -> None:
        if num_symbols < 2 or digits < 1:
            raise ConfigError(
                f"sort needs num_symbols >= 2, digits >= 1; got {num_symbols}, {digits}"
            )
        self.num_symbols, self.digits = num_symbols, digits
        self.comma = num_symbols if digits > 1 else None
        super().__init__(num_symbols + (digits > 1), min_size)
        self.length_mapping = (
            "n = (length - 1) // 2 numbers"
            if digits == 1
            else f"n = (length + 1) // {2 * (digits + 1)} numbers of {digits} digits"
        )

    def list_tokens(self, size: int) -> int:
        return size * self.digits if self.digits == 1 else size * (self.digits + 1) - 1

    def footprint(self, size: int) -> int:
        return 2 * self.list_tokens(size) + 2

    def instances(self, sizes: Tensor, generator: torch.Generator) -> Instances:
        b, n = len(sizes), int(sizes.max())
        top = self.num_symbols**self.digits
        values = torch.randint(top, (b, n), generator=generator)
        valid = torch.arange(n) < sizes.unsqueeze(1)
        ordered = values.masked_fill(~valid, top).sort(dim=1).values.clamp(max=top - 1)
        prompt, plen = join_items(
            digits_of(values, self.digits, self.num_symbols), sizes, self.comma
        )
        answer, alen = join_items(
            digits_of(ordered, self.digits, self.num_symbols), sizes, self.comma
        )
        return Instances(prompt, plen, answer, alen)
