"""Duplicate string: read a random string ``w``, then write ``ww`` (Deletang et al. 2023).

Layout of one instance of size ``n`` (``3n + 2`` tokens)::

    BOS x_1 .. x_n SEP x_1 .. x_n x_1 .. x_n

Length mapping: string size ``n = (length - 1) // 3``; only the ``2n`` output tokens are scored.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posx.tasks.synthetic.common import StringTask


class DuplicateTask(StringTask):
    """Write the string twice; the second half tests copying from an output-side position."""

    length_mapping = "string size n = (length - 1) // 3"

    def footprint(self, size: int) -> int:
        return 3 * size + 2

    def answer_index(self, sizes: Tensor) -> tuple[Tensor, Tensor]:
        j = torch.arange(2 * int(sizes.max())).expand(len(sizes), -1)
        n = sizes.unsqueeze(1)
        return torch.where(j < n, j, j - n), 2 * sizes
