"""Dyck: is a bracket string balanced? (Deletang et al. 2023; Hahn 2020).

Layout for ``m`` pairs (``2m + 3`` tokens; ``(`` is id 0, ``)`` id 1, the answer is id 2 for
"unbalanced" or id 3 for "balanced")::

    BOS ( ) ( ( ) ) SEP 3

Every string has exactly ``m`` opening and ``m`` closing brackets, so counting is no shortcut:
balanced means every prefix has at least as many ``(`` as ``)``. Half of the strings are made
balanced (a random arrangement rotated to start after its lowest prefix, the cycle lemma), the
other half are random arrangements (balanced with probability ``1 / (m + 1)``); the label is
always computed from the string.

Length mapping: ``m = (length - 2) // 2`` bracket pairs. Only the answer token is scored.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posx.tasks.synthetic.common import Instances, SyntheticTask

OPEN, CLOSE, NO, YES = 0, 1, 2, 3


def prefix_heights(brackets: Tensor, lengths: Tensor) -> Tensor:
    """Running depth ``[b, w]`` of ``brackets [b, w]``; positions past ``lengths`` are huge."""
    h = torch.where(brackets == OPEN, 1, -1).cumsum(1)
    return h.masked_fill(torch.arange(brackets.shape[1]) >= lengths.unsqueeze(1), 1 << 30)


class DyckTask(SyntheticTask):
    """Balanced-bracket recognition over one bracket type.

    Args:
        min_size: Fewest bracket pairs drawn in training.
    """

    length_mapping = "m = (length - 2) // 2 bracket pairs"

    def __init__(self, min_size: int = 1) -> None:
        super().__init__(4, min_size)

    def footprint(self, size: int) -> int:
        return 2 * size + 3

    def instances(self, sizes: Tensor, generator: torch.Generator) -> Instances:
        b, w = len(sizes), 2 * int(sizes.max())
        n = (2 * sizes).unsqueeze(1)
        j = torch.arange(w).expand(b, -1)
        # A uniform arrangement of m opens and m closes: shuffle the valid prefix only.
        keys = torch.rand(b, w, generator=generator).masked_fill(j >= n, 2.0)
        base = torch.where(j < sizes.unsqueeze(1), OPEN, CLOSE)
        brackets = base.gather(1, keys.argsort(1))
        # Cycle lemma: starting right after a lowest prefix makes every prefix non-negative.
        low = prefix_heights(brackets, 2 * sizes).argmin(1, keepdim=True)
        rotated = brackets.gather(1, (low + 1 + j) % n)
        make_balanced = torch.rand(b, 1, generator=generator) < 0.5
        brackets = torch.where(make_balanced & (j < n), rotated, brackets)
        balanced = prefix_heights(brackets, 2 * sizes).min(1, keepdim=True).values >= 0
        return Instances(
            brackets, 2 * sizes, torch.where(balanced, YES, NO), torch.ones_like(sizes)
        )
