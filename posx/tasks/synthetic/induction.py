"""Induction: continue a segment of the prompt from its first few tokens.

The prompt is a random string; after SEP come the first ``cue`` tokens of a random segment of
it (given, not scored), and the model must write the next ``segment`` tokens, i.e. find where
the cue occurred and copy what followed (the induction-head pattern of Olsson et al. 2022).
If the cue occurs more than once, the answer continues its *first* occurrence, so every
instance has exactly one right answer. Layout for a prompt of ``n`` symbols::

    BOS r_1 .. r_n SEP r_j .. r_{j+c-1} r_{j+c} .. r_{j+c+s-1}

Length mapping: ``n + c + s + 2`` tokens per instance, so ``n = length - 1 - c - s`` symbols;
the segment start is uniform over the prompt, so retrieval distance grows with the length.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posx.errors import ConfigError
from posx.tasks.synthetic.common import Instances, SyntheticTask


class InductionTask(SyntheticTask):
    """Cued copying of a ``segment``-token span from anywhere in the prompt.

    Args:
        num_symbols: Alphabet size; ``num_symbols ** cue`` should dwarf the prompt length so
            that cues are mostly unique.
        cue: Tokens of the segment given after SEP.
        segment: Tokens to continue (scored).
        min_size: Shortest prompt drawn in training (at least ``cue + segment``).
    """

    def __init__(
        self, num_symbols: int = 16, cue: int = 3, segment: int = 8, min_size: int = 16
    ) -> None:
        if num_symbols < 2 or cue < 1 or segment < 1:
            raise ConfigError(
                f"induction needs num_symbols >= 2, cue >= 1, segment >= 1; got"
                f" {num_symbols}, {cue}, {segment}"
            )
        if min_size < cue + segment:
            raise ConfigError(f"induction needs min_size >= cue + segment = {cue + segment}")
        self.num_symbols, self.cue, self.segment = num_symbols, cue, segment
        self.length_mapping = f"n = length - {1 + cue + segment} prompt symbols"
        super().__init__(num_symbols, min_size)

    def footprint(self, size: int) -> int:
        return size + self.cue + self.segment + 2

    def instances(self, sizes: Tensor, generator: torch.Generator) -> Instances:
        b, w, c, span = len(sizes), int(sizes.max()), self.cue, self.cue + self.segment
        r = torch.randint(self.num_symbols, (b, w), generator=generator)
        starts = sizes - span + 1  # valid segment starts: 0 .. n - span
        j = (torch.rand(b, generator=generator) * starts).long().clamp(max=starts - 1)
        # The cue's first occurrence: compare every c-gram's code with the chosen one's.
        codes = r.unfold(1, c, 1) @ (self.num_symbols ** torch.arange(c))  # [b, w - c + 1]
        same = codes == codes.gather(1, j.unsqueeze(1))
        first = same.int().argmax(1, keepdim=True)  # <= j, so the continuation fits
        answer = r.gather(1, first + torch.arange(span))
        scored = (torch.arange(span) >= c).expand(b, -1)
        return Instances(r, sizes, answer, torch.full_like(sizes, span), scored)
