"""Aggregation over a long list: RULER's cwe (common words) and fwe (frequent words).

Both answer from counts over the whole prompt, not from one place in it, so attention that
dilutes or drifts with length shows as wrong counts. Layout (no query token: the question is
the same for every instance)::

    BOS x_1 .. x_m SEP answer

- :class:`CommonItemsTask` (cwe): ``C`` common items repeated ``common_repeats`` times and
  ``n`` uncommon items repeated ``uncommon_repeats`` times (all distinct items), shuffled; the
  answer is the ``C`` common items in ascending id order (RULER scores the set; a fixed order
  makes it one right sequence under teacher forcing).
- :class:`FrequentItemsTask` (fwe): items at Zipf ranks ``r = 1, 2, ..`` repeated
  ``floor(n / (zeta(alpha) r^alpha))`` times (RULER's counts); rank 1 is a fixed NOISE token
  (RULER's ``...``, to be ignored) and the answer is the items of ranks ``2 .. answers + 1``,
  most frequent first.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posx.errors import ConfigError
from posx.tasks.synthetic.common import Instances, SyntheticTask
from posx.tasks.synthetic.haystack import shuffled_multiset


class CommonItemsTask(SyntheticTask):
    """The ``common`` items repeated most often in a shuffled list (RULER's cwe).

    Args:
        common: Common items per sequence ``C`` (RULER: 10).
        common_repeats: Repeats of each common item (RULER: 30, or 6 below 4k tokens).
        uncommon_repeats: Repeats of each uncommon item (RULER: 3, or 1 below 4k tokens);
            below ``common_repeats``, so the common items are unique.
        num_items: Item alphabet; at least ``common + n`` at every length used.
        min_size: Fewest uncommon items drawn in training.
    """

    def __init__(
        self,
        common: int = 3,
        common_repeats: int = 4,
        uncommon_repeats: int = 1,
        num_items: int = 256,
        min_size: int = 1,
    ) -> None:
        if common < 1 or uncommon_repeats < 1 or common_repeats <= uncommon_repeats:
            raise ConfigError(
                "cwe needs common >= 1 and common_repeats > uncommon_repeats >= 1; got"
                f" {common}, {common_repeats}, {uncommon_repeats}"
            )
        if num_items < common + 1:
            raise ConfigError(f"cwe needs num_items > common ({common}), got {num_items}")
        self.common, self.common_repeats = common, common_repeats
        self.uncommon_repeats, self.num_items = uncommon_repeats, num_items
        fixed, per = common * (common_repeats + 1) + 2, uncommon_repeats
        self.length_mapping = f"n = (length - {fixed - 1}) // {per} uncommon items"
        super().__init__(num_items, min_size)

    def footprint(self, size: int) -> int:
        return self.common * (self.common_repeats + 1) + size * self.uncommon_repeats + 2

    def size_for(self, length: int) -> int:
        n = super().size_for(length)
        if self.common + n > self.num_items:
            raise ConfigError(
                f"cwe at length {length} needs {self.common + n} distinct items but num_items ="
                f" {self.num_items}; raise task.num_items"
            )
        return n

    def instances(self, sizes: Tensor, generator: torch.Generator) -> Instances:
        b, c = len(sizes), self.common
        width = c + int(sizes.max())
        items = torch.rand(b, self.num_items, generator=generator).argsort(1)[:, :width]
        counts = torch.full((b, width), self.uncommon_repeats)
        counts[:, :c] = self.common_repeats
        counts = counts.masked_fill(torch.arange(width) >= c + sizes.unsqueeze(1), 0)
        slots, lengths = shuffled_multiset(counts, generator)
        answer = items[:, :c].sort(1).values
        return Instances(items.gather(1, slots), lengths, answer, torch.full_like(sizes, c))

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "common": self.common, "repeats": self.common_repeats}


class FrequentItemsTask(SyntheticTask):
    """The most frequent items of a Zipf-distributed list, noise excluded (RULER's fwe).

    Counts follow RULER: rank ``r`` appears ``floor(n / (zeta(alpha) r^alpha))`` times. Where
    rounding would tie the answer ranks with each other or with rank ``answers + 2``, a rank
    is raised to one more than the next, so the answer is always unique (this only touches
    small ``n``; counts stay monotone in ``n``).

    Token ids: items ``0 .. num_items - 1``, then NOISE.

    Args:
        answers: Frequent items asked (RULER: 3).
        alpha: Zipf exponent (RULER: 2.0).
        num_items: Item alphabet; ranks past ``num_items + 1`` are left out of the list.
        min_size: Smallest Zipf scale ``n`` drawn in training.
    """

    def __init__(
        self, answers: int = 3, alpha: float = 2.0, num_items: int = 64, min_size: int = 1
    ) -> None:
        if answers < 1 or alpha <= 1.0 or num_items < answers + 1:
            raise ConfigError(
                "fwe needs answers >= 1, alpha > 1 and num_items > answers; got"
                f" {answers}, {alpha}, {num_items}"
            )
        self.answers, self.alpha, self.num_items = answers, alpha, num_items
        self.noise = num_items
        zeta = sum(r**-alpha for r in range(1, 100_000)) + 100_000 ** (1 - alpha) / (alpha - 1)
        ranks = torch.arange(1, num_items + 2, dtype=torch.float64)  # noise + every item
        self.share = ranks**-alpha / zeta  # [R] expected share of the list per rank
        self.length_mapping = "n = the largest Zipf scale whose list fits length"
        super().__init__(num_items + 1, min_size)

    def counts(self, sizes: Tensor) -> Tensor:
        """``[b, R]`` repeats per rank (rank 1 = NOISE first) for Zipf scales ``sizes [b]``."""
        counts = (sizes.unsqueeze(1).double() * self.share).floor().long()
        for r in range(self.answers, -1, -1):  # ranks answers+1 .. 1: strictly above the next
            counts[:, r] = torch.maximum(counts[:, r], counts[:, r + 1] + 1)
        return counts

    def footprint(self, size: int) -> int:
        return int(self.counts(torch.tensor([size])).sum()) + self.answers + 2

    def size_bound(self, length: int) -> int:
        # Each of the R ranks rounds down by less than one, so a list of scale n holds more
        # than n - R items: no scale past length + 1 + R fits.
        return length + 1 + len(self.share)

    def instances(self, sizes: Tensor, generator: torch.Generator) -> Instances:
        b = len(sizes)
        ranked = torch.rand(b, self.num_items, generator=generator).argsort(1)  # rank 2 first
        items = torch.cat([torch.full((b, 1), self.noise), ranked], dim=1)  # [b, R]
        slots, lengths = shuffled_multiset(self.counts(sizes), generator)
        answer = ranked[:, : self.answers]
        return Instances(
            items.gather(1, slots), lengths, answer, torch.full_like(sizes, self.answers)
        )

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "answers": self.answers, "alpha": self.alpha}
