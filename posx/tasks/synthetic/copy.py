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

from posx.tasks.synthetic.common import StringTask


class CopyTask(StringTask):
    """Copy a string of ``num_symbols`` possible symbols.

    Args:
        num_symbols: Alphabet size (symbols are ids ``0..num_symbols-1``).
        min_size: Smallest string length drawn in training.
    """

    length_mapping = "string size n = (length - 1) // 2"

    def footprint(self, size: int) -> int:
        return 2 * size + 2

    def answer_index(self, sizes: Tensor) -> tuple[Tensor, Tensor]:
        return torch.arange(int(sizes.max())).expand(len(sizes), -1), sizes
