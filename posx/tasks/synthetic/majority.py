"""Majority: the most frequent symbol of a list (ties go to the smallest symbol id).

Layout for a list of ``n`` symbols (``n + 3`` tokens)::

    BOS x_1 .. x_n SEP argmax_s count(s)

Length mapping: ``n = length - 2`` symbols. Only the one answer token is scored. Counting over
the whole list is what makes this a test of attention that does not dilute with length.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from posx.errors import ConfigError
from posx.tasks.synthetic.common import Instances, SyntheticTask, prefix_mask


class MajorityTask(SyntheticTask):
    """The majority symbol of a list over ``num_symbols`` symbols.

    Args:
        num_symbols: Alphabet size (ids ``0 .. num_symbols - 1``).
        min_size: Shortest list drawn in training.
    """

    length_mapping = "n = length - 2 symbols"

    def __init__(self, num_symbols: int = 4, min_size: int = 1) -> None:
        if num_symbols < 2:
            raise ConfigError(f"majority needs num_symbols >= 2, got {num_symbols}")
        self.num_symbols = num_symbols
        super().__init__(num_symbols, min_size)

    def footprint(self, size: int) -> int:
        return size + 3

    def instances(self, sizes: Tensor, generator: torch.Generator) -> Instances:
        x = torch.randint(self.num_symbols, (len(sizes), int(sizes.max())), generator=generator)
        counts = (F.one_hot(x, self.num_symbols) * prefix_mask(sizes, x.shape[1])[..., None]).sum(1)
        winner = counts.argmax(1, keepdim=True)  # argmax returns the first maximum: smallest id
        return Instances(x, sizes, winner, torch.ones_like(sizes))
