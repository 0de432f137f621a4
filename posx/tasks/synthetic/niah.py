"""Needle retrieval with distractors: RULER's niah_multikey, niah_multivalue, niah_multiquery.

RULER's needle is "One of the special magic numbers for {key} is: {value}." hidden at a
random depth of a haystack; its multi-needle tasks hide needles of several keys
(``num_needle_k``), several values per key (``num_needle_v``) and ask for several keys
(``num_needle_q``). At the token level a needle is ``NEEDLE k v_1 .. v_D`` (a marker, one key
token, a ``D``-token value) and the haystack a repeating filler pattern. Layout for ``n``
filler tokens, ``K`` keys with ``V`` needles each (``N = K V``) and ``Q`` queried keys::

    BOS f .. NEEDLE k v .. f .. NEEDLE k' v' .. f .. SEP q_1 values(q_1) .. q_Q values(q_Q)

The ``K`` keys of a sequence are distinct, so every needle of another key is a distractor
whose key is never a queried one; values are drawn independently (a distractor may carry the
same value; the key decides). Needles are shuffled and put at sorted uniform depths in the
filler. The queried keys are ``Q`` distinct keys of the sequence in random order, given after
SEP (not scored; RULER's answer prefix names the keys too), each followed by its ``V`` values
in the order they appear in the prompt (``Q V D`` scored tokens).

Length mapping: ``n + N (D + 2) + Q (V D + 1) + 2`` tokens per instance.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posx.errors import ConfigError
from posx.tasks.synthetic.common import Instances, SyntheticTask
from posx.tasks.synthetic.haystack import place_needles, sorted_depths


class NeedleTask(SyntheticTask):
    """Multi-key / multi-value / multi-query needle retrieval in filler.

    Token ids: values ``0 .. num_values - 1``, keys next, then the filler pattern and NEEDLE.

    Args:
        keys: Distinct keys with needles per sequence (RULER's ``num_needle_k``).
        values_per_key: Needles (values) per key (``num_needle_v``); all are the answer.
        queries: Keys asked (``num_needle_q``), at most ``keys``.
        num_keys: Key alphabet.
        num_values: Value alphabet (a value is ``value_tokens`` symbols of it).
        value_tokens: Tokens per value ``D``.
        filler_tokens: Period of the filler pattern.
        min_size: Fewest filler tokens drawn in training.
    """

    def __init__(
        self,
        keys: int = 4,
        values_per_key: int = 1,
        queries: int = 1,
        num_keys: int = 16,
        num_values: int = 16,
        value_tokens: int = 1,
        filler_tokens: int = 8,
        min_size: int = 1,
    ) -> None:
        if min(keys, values_per_key, queries, value_tokens, filler_tokens) < 1 or num_values < 2:
            raise ConfigError(
                "niah needs keys, values_per_key, queries, value_tokens, filler_tokens >= 1 and"
                f" num_values >= 2; got {keys}, {values_per_key}, {queries}, {value_tokens},"
                f" {filler_tokens}, {num_values}"
            )
        if queries > keys or keys > num_keys:
            raise ConfigError(
                f"niah needs queries <= keys <= num_keys; got {queries}, {keys}, {num_keys}"
            )
        self.keys, self.values_per_key, self.queries = keys, values_per_key, queries
        self.num_keys, self.num_values, self.value_tokens = num_keys, num_values, value_tokens
        self.filler_tokens = filler_tokens
        self.first_filler = num_values + num_keys
        self.needle_mark = self.first_filler + filler_tokens
        fixed = self.footprint(0)
        self.length_mapping = f"n = length - {fixed - 1} filler tokens"
        super().__init__(self.needle_mark + 1, min_size)

    @property
    def needles(self) -> int:
        """Needles per sequence, ``N = keys * values_per_key``."""
        return self.keys * self.values_per_key

    def footprint(self, size: int) -> int:
        d, q = self.value_tokens, self.queries
        return size + self.needles * (d + 2) + q * (self.values_per_key * d + 1) + 2

    def instances(self, sizes: Tensor, generator: torch.Generator) -> Instances:
        b, k, v, q, d = len(sizes), self.keys, self.values_per_key, self.queries, self.value_tokens
        n = self.needles
        keys = torch.rand(b, self.num_keys, generator=generator).argsort(1)[:, :k]
        values = torch.randint(self.num_values, (b, n, d), generator=generator)
        # Needle j carries key j // V before shuffling; order[:, s] is the needle at slot s.
        order = torch.rand(b, n, generator=generator).argsort(1)
        owner = order // v  # [b, N]: key index of the needle at each slot
        key_tok = self.num_values + keys.gather(1, owner)
        slot_values = values.gather(1, order.unsqueeze(2).expand(-1, -1, d))
        needle = torch.cat(
            [torch.full((b, n, 1), self.needle_mark), key_tok.unsqueeze(2), slot_values], dim=2
        )
        depth = sorted_depths(sizes, n, generator)
        hay, hay_len = place_needles(needle, depth, sizes, self.first_filler, self.filler_tokens)
        asked = torch.rand(b, k, generator=generator).argsort(1)[:, :q]  # [b, Q] key indices
        # For each query, its V slots in prompt order: a stable sort puts them first.
        mine = owner.unsqueeze(1) == asked.unsqueeze(2)  # [b, Q, N]
        slots = (~mine).long().argsort(dim=2, stable=True)[:, :, :v]  # [b, Q, V]
        found = slot_values.gather(1, slots.reshape(b, q * v, 1).expand(-1, -1, d))
        # After SEP each asked key (given) is followed by its values (scored), as RULER's answer
        # prefix names the key right before the answer.
        asked_tok = (self.num_values + keys.gather(1, asked)).unsqueeze(2)  # [b, Q, 1]
        answer = torch.cat([asked_tok, found.reshape(b, q, v * d)], dim=2).reshape(b, -1)
        scored = (torch.arange(q * (v * d + 1)) % (v * d + 1) != 0).expand(b, -1)
        return Instances(hay, hay_len, answer, torch.full_like(sizes, answer.shape[1]), scored)

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "needles": self.needles, "queries": self.queries}
