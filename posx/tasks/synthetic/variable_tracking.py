"""Variable tracking with k hops: RULER's vt at the token level.

RULER hides chains of assignments ``VAR X1 = 12345``, ``VAR X2 = VAR X1``, ... in a haystack
and asks for every variable that holds the value. At the token level a statement is
``LET x y`` (three tokens; ``y`` is a value token for a chain's first statement, the previous
variable otherwise). Layout for ``n`` filler tokens, ``C`` chains of ``H`` hops each::

    BOS f .. LET x_0 v f .. LET x_1 x_0 .. LET x'_0 v' .. LET x_H x_{H-1} f .. SEP v x_0 .. x_H

Every chain has its own value and its own variables (all distinct within a sequence), so the
other ``C - 1`` chains are distractors that never hold the asked value. Statements of one
chain appear in chain order (RULER's noise haystack inserts them in order too), chains are
interleaved uniformly at random, and statements sit at sorted uniform depths in the filler.
After SEP comes the first chain's value (given, not scored: RULER's answer prefix repeats the
asked value), then the answer: that chain's ``H + 1`` variables in chain order, which is also
the order they are assigned in the prompt.

Length mapping: ``n + (3C + 1)(H + 1) + 3`` tokens per instance.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from posx.errors import ConfigError
from posx.tasks.synthetic.common import Instances, SyntheticTask
from posx.tasks.synthetic.haystack import place_needles, sorted_depths


class VariableTrackingTask(SyntheticTask):
    """Find every variable that a chain of ``hops`` assignments gives the asked value.

    Token ids: variables ``0 .. num_vars - 1``, values next, then the filler pattern and LET.

    Args:
        hops: Assignments after the first in each chain (RULER's ``num_hops``).
        chains: Chains per sequence, the first asked, the others distractors
            (``num_chains``).
        num_vars: Variable alphabet (at least ``chains * (hops + 1)``).
        num_values: Value alphabet (at least ``chains``).
        filler_tokens: Period of the filler pattern.
        min_size: Fewest filler tokens drawn in training.
    """

    def __init__(
        self,
        hops: int = 4,
        chains: int = 1,
        num_vars: int = 32,
        num_values: int = 16,
        filler_tokens: int = 8,
        min_size: int = 1,
    ) -> None:
        if hops < 1 or chains < 1 or filler_tokens < 1:
            raise ConfigError(
                f"vt needs hops, chains, filler_tokens >= 1; got {hops}, {chains}, {filler_tokens}"
            )
        if num_vars < chains * (hops + 1) or num_values < chains:
            raise ConfigError(
                f"vt with {chains} chain(s) of {hops} hops needs num_vars >="
                f" {chains * (hops + 1)} and num_values >= {chains}; got {num_vars}, {num_values}"
            )
        self.hops, self.chains, self.num_vars, self.num_values = hops, chains, num_vars, num_values
        self.filler_tokens = filler_tokens
        self.first_filler = num_vars + num_values
        self.let = self.first_filler + filler_tokens
        self.length_mapping = f"n = length - {self.footprint(0) - 1} filler tokens"
        super().__init__(self.let + 1, min_size)

    def footprint(self, size: int) -> int:
        return size + (3 * self.chains + 1) * (self.hops + 1) + 3

    def instances(self, sizes: Tensor, generator: torch.Generator) -> Instances:
        b, c, h = len(sizes), self.chains, self.hops + 1
        var = torch.rand(b, self.num_vars, generator=generator).argsort(1)[:, : c * h]
        var = var.reshape(b, c, h)
        value = self.num_vars + torch.rand(b, self.num_values, generator=generator).argsort(1)
        value = value[:, :c]
        # Statement j of chain i assigns var[i, j] the value (j = 0) or var[i, j - 1].
        source = torch.cat([value.unsqueeze(2), var[:, :, :-1]], dim=2)
        statement = torch.stack([torch.full_like(var, self.let), var, source], dim=3)
        # A uniform interleaving that keeps each chain in order: shuffle the chain labels of
        # the c*h slots; the r-th slot labelled i holds statement r of chain i.
        label = torch.rand(b, c * h, generator=generator).argsort(1) // h  # [b, c*h]
        rank = F.one_hot(label, c).cumsum(1).gather(2, label.unsqueeze(2)).squeeze(2) - 1
        flat = statement.reshape(b, c * h, 3)
        ordered = flat.gather(1, (label * h + rank).unsqueeze(2).expand(-1, -1, 3))
        depth = sorted_depths(sizes, c * h, generator)
        hay, hay_len = place_needles(ordered, depth, sizes, self.first_filler, self.filler_tokens)
        # After SEP the asked value (given, as RULER's answer prefix repeats it), then the
        # chain's variables (scored).
        answer = torch.cat([value[:, :1], var[:, 0]], dim=1)
        scored = (torch.arange(h + 1) > 0).expand(b, -1)
        return Instances(hay, hay_len, answer, torch.full_like(sizes, h + 1), scored)

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "hops": self.hops, "chains": self.chains}
