"""Modular arithmetic: the sum of a list of residues modulo ``p`` (parity when ``p = 2``).

Layout for a list of ``n`` residues (``n + 3`` tokens)::

    BOS x_1 .. x_n SEP (x_1 + .. + x_n) mod p

Length mapping: ``n = length - 2`` residues. Only the one answer token is scored, so token
accuracy and exact match coincide. ``modulus: 2`` is the parity task of Deletang et al. 2023
and Anil et al. 2022.

With ``scratchpad: true`` the answer is the running sum after every residue (Anil et al. 2022's
scratchpad), the last of which is the total::

    BOS x_1 .. x_n SEP s_1 .. s_n        s_i = (x_1 + .. + x_i) mod p

Each answer token then needs only one prompt token and the previous answer token, which a small
model learns in minutes; without it a 2-layer model stays at chance on 30-bit parity. The
length mapping becomes ``n = (length - 1) // 2`` and every running sum is scored.
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
        scratchpad: Answer with every running sum instead of the total alone.
    """

    def __init__(self, modulus: int = 5, min_size: int = 1, scratchpad: bool = False) -> None:
        if modulus < 2:
            raise ConfigError(f"modular sum needs modulus >= 2, got {modulus}")
        self.modulus, self.scratchpad = modulus, scratchpad
        self.length_mapping = (
            "n = (length - 1) // 2 residues" if scratchpad else "n = length - 2 residues"
        )
        super().__init__(modulus, min_size)

    def footprint(self, size: int) -> int:
        return 2 * size + 2 if self.scratchpad else size + 3

    def instances(self, sizes: Tensor, generator: torch.Generator) -> Instances:
        x = torch.randint(self.modulus, (len(sizes), int(sizes.max())), generator=generator)
        running = (x * prefix_mask(sizes, x.shape[1])).cumsum(1) % self.modulus
        if self.scratchpad:
            return Instances(x, sizes, running, sizes)
        total = running.gather(1, (sizes - 1).unsqueeze(1))
        return Instances(x, sizes, total, torch.ones_like(sizes))
