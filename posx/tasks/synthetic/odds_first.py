"""Odds first: write the symbols at odd positions, then those at even positions.

From Deletang et al. 2023. Layout of one instance of size ``n`` (``2n + 2`` tokens)::

    BOS x_1 x_2 .. x_n SEP x_1 x_3 x_5 .. x_2 x_4 ..

Length mapping: string size ``n = (length - 1) // 2``; only the output is scored.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posx.tasks.synthetic.common import StringTask


class OddsFirstTask(StringTask):
    """Positions 1, 3, 5, .. (1-based) first, then 2, 4, 6, ..."""

    length_mapping = "string size n = (length - 1) // 2"

    def footprint(self, size: int) -> int:
        return 2 * size + 2

    def answer_index(self, sizes: Tensor) -> tuple[Tensor, Tensor]:
        j = torch.arange(int(sizes.max())).expand(len(sizes), -1)
        odd = (sizes.unsqueeze(1) + 1) // 2  # how many odd (1-based) positions there are
        return torch.where(j < odd, 2 * j, 2 * (j - odd) + 1), sizes
