"""Reverse: read a random string, then write it backwards after a separator.

Layout of one instance of size ``n`` (``2n + 2`` tokens)::

    BOS x_1 .. x_n SEP x_n .. x_1

Length mapping: string size ``n = (length - 1) // 2``; only the reversed string is scored.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posx.tasks.synthetic.common import StringTask, reverse_prefix


class ReverseTask(StringTask):
    """Reverse a string of ``num_symbols`` possible symbols (Deletang et al. 2023)."""

    length_mapping = "string size n = (length - 1) // 2"

    def footprint(self, size: int) -> int:
        return 2 * size + 2

    def answer_index(self, sizes: Tensor) -> tuple[Tensor, Tensor]:
        plain = torch.arange(int(sizes.max())).expand(len(sizes), -1)
        return reverse_prefix(plain, sizes), sizes
