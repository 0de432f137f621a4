"""Addition: two ``n``-digit decimal numbers, then their sum (Kazemnejad et al. 2023).

Layout for ``n`` digits (the sum always has ``n + 1`` digits, leading zero kept, so the answer
length is known from the question)::

    BOS a_1 .. a_n + b_1 .. b_n SEP s_0 s_1 .. s_n

Operands are uniform over ``[0, 10^n)`` (leading zeros allowed). With ``reverse_digits: true``
every number is written least-significant digit first, the order in which carries are made.

Length mapping: ``3n + 4`` tokens per instance, so ``n = (length - 3) // 3`` digits.
Only the sum is scored.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posx.tasks.synthetic.common import Instances, SyntheticTask, reverse_prefix

BASE = 10


def add_digits(a: Tensor, b: Tensor) -> Tensor:
    """Sum of little-endian digit rows ``a, b [b, w]``: ``[b, w + 1]`` digits, vectorised.

    The carry out of digit ``i`` is the carry generated at the last digit ``j <= i`` whose
    digit sum is not 9 (nines only propagate a carry), so no loop over digits is needed.
    """
    s = torch.nn.functional.pad(a + b, (0, 1))
    idx = torch.arange(s.shape[1]).expand_as(s)
    last = torch.where(s != BASE - 1, idx, -1).cummax(dim=1).values
    carry_out = (last >= 0) & (s.gather(1, last.clamp(min=0)) >= BASE)
    carry_in = torch.nn.functional.pad(carry_out[:, :-1], (1, 0))
    return (s + carry_in) % BASE


class AdditionTask(SyntheticTask):
    """Multi-digit addition; digits are ids 0-9, ``+`` is id 10.

    Args:
        reverse_digits: Write operands and sum least-significant digit first.
        min_size: Fewest digits per operand drawn in training.
    """

    length_mapping = "n = (length - 3) // 3 digits per operand"

    def __init__(self, reverse_digits: bool = False, min_size: int = 1) -> None:
        self.reverse_digits = reverse_digits
        self.plus = BASE
        super().__init__(BASE + 1, min_size)

    def footprint(self, size: int) -> int:
        return 3 * size + 4

    def instances(self, sizes: Tensor, generator: torch.Generator) -> Instances:
        b, w = len(sizes), int(sizes.max())
        n = sizes.unsqueeze(1)
        valid = torch.arange(w) < n
        # Little-endian digits, zero above each row's size: an n-digit number.
        a = torch.randint(BASE, (b, w), generator=generator) * valid
        c = torch.randint(BASE, (b, w), generator=generator) * valid
        total = add_digits(a, c)
        if not self.reverse_digits:
            a, c, total = (
                reverse_prefix(a, sizes),
                reverse_prefix(c, sizes),
                reverse_prefix(total, sizes + 1),
            )
        j = torch.arange(2 * w + 1).expand(b, -1)
        prompt = torch.where(
            j < n, a.gather(1, j.clamp(max=w - 1)), c.gather(1, (j - n - 1).clamp(0, w - 1))
        )
        prompt = torch.where(j == n, self.plus, prompt)
        return Instances(prompt, 2 * sizes + 1, total, sizes + 1)
