"""Modular arithmetic: the sum of a list of residues modulo ``p`` (parity when ``p = 2``).

Layout for a list of ``n`` residues (``n + 3`` tokens)::

    BOS x_1 .. x_n SEP (x_1 + .. + x_n) mod p

Length mapping: ``n = length - 2`` residues. Only the one answer token is scored, so token
accuracy and exact match coincide. ``modulus: 2`` is the parity task of Deletang et al. 2023
and Anil et al. 2022.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posx.errors import ConfigError
from posx.tasks.synthetic.common import Instances, SyntheticTask, prefix_mask


class ModularSumTask(SyntheticTask):
    """Sum a list of ``0 .. modulus - 1`` modulo ``modulus``.

    Args:
        modulus: ``p``; residues are ids ``0 .. p - 1``.
        min_size: Shortest list drawn in training.
    """

    length_mapping = "n = length - 2 residues"

    def __init__(self, modulus: int = 5, min_size: int = 1) -> None:
        if modulus < 2:
            raise ConfigError(f"modular sum needs modulus >= 2, got {modulus}")
        self.modulus = modulus
        super().__init__(modulus, min_size)

    def footprint(self, size: int) -> int:
        return size + 3

    def instances(self, sizes: Tensor, generator: torch.Generator) -> Instances:
        x = torch.randint(self.modulus, (len(sizes), int(sizes.max())), generator=generator)
        total = (x * prefix_mask(sizes, x.shape[1])).sum(1, keepdim=True) % self.modulus
        return Instances(x, sizes, total, torch.ones_like(sizes))
