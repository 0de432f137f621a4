"""Multiplication (small): an ``n``-digit number times a ``k``-digit number.

Layout for ``n`` digits and ``k = multiplier_digits`` (the product always has ``n + k``
digits, leading zeros kept)::

    BOS a_1 .. a_n * b_1 .. b_k SEP p_1 .. p_{n+k}

Operands are uniform over ``[0, 10^n)`` and ``[0, 10^k)``. Only the first operand grows with
the length, so the per-digit work stays small (a ``k``-digit multiplier) while the number of
digits to carry through grows. ``reverse_digits: true`` writes all numbers least-significant
digit first.

Length mapping: ``2n + 2k + 3`` tokens per instance, so ``n = (length - 2) // 2 - k`` digits.
Only the product is scored.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from posx.errors import ConfigError
from posx.tasks.synthetic.common import Instances, SyntheticTask, reverse_prefix

BASE = 10


def multiply_digits(a: Tensor, m: Tensor) -> Tensor:
    """Product of little-endian digit rows ``a [b, w]`` and ``m [b, k]``: ``[b, w + k]``.

    Schoolbook columns first (each a sum of at most ``k`` digit products), then carries are
    pushed up in parallel until none is left (as many rounds as the longest carry chain).
    """
    w, k = a.shape[1], m.shape[1]
    col = torch.zeros(a.shape[0], w + k, dtype=torch.long)
    for j in range(k):
        col[:, j : j + w] += a * m[:, j : j + 1]
    while True:
        carry = col // BASE
        if not carry.any():
            return col
        col = col % BASE + F.pad(carry[:, :-1], (1, 0))


class MultiplicationTask(SyntheticTask):
    """Long multiplication by a short number; digits are ids 0-9, ``*`` is id 10.

    Args:
        multiplier_digits: Digits ``k`` of the second operand.
        reverse_digits: Write every number least-significant digit first.
        min_size: Fewest digits of the first operand drawn in training.
    """

    def __init__(
        self, multiplier_digits: int = 2, reverse_digits: bool = False, min_size: int = 1
    ) -> None:
        if multiplier_digits < 1:
            raise ConfigError(
                f"multiplication needs multiplier_digits >= 1, got {multiplier_digits}"
            )
        self.k, self.reverse_digits, self.times = multiplier_digits, reverse_digits, BASE
        self.length_mapping = f"n = (length - 2) // 2 - {self.k} digits times {self.k} digits"
        super().__init__(BASE + 1, min_size)

    def footprint(self, size: int) -> int:
        return 2 * size + 2 * self.k + 3

    def instances(self, sizes: Tensor, generator: torch.Generator) -> Instances:
        b, w, k = len(sizes), int(sizes.max()), self.k
        n = sizes.unsqueeze(1)
        a = torch.randint(BASE, (b, w), generator=generator) * (torch.arange(w) < n)
        m = torch.randint(BASE, (b, k), generator=generator)
        product = multiply_digits(a, m)
        if not self.reverse_digits:
            a, m, product = reverse_prefix(a, sizes), m.flip(1), reverse_prefix(product, sizes + k)
        j = torch.arange(w + 1 + k).expand(b, -1)
        prompt = torch.where(
            j < n, a.gather(1, j.clamp(max=w - 1)), m.gather(1, (j - n - 1).clamp(0, k - 1))
        )
        prompt = torch.where(j == n, self.times, prompt)
        return Instances(prompt, sizes + 1 + k, product, sizes + k)
