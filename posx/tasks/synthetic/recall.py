"""Associative recall: key -> value pairs, then queries for some of the keys.

Layout for ``n`` pairs, keys of ``t = key_tokens`` tokens and ``q = num_queries`` queries::

    BOS k_1 v_1 k_2 v_2 .. k_n v_n SEP k_a v_a k_b v_b ..

Keys are distinct within a sequence (drawn without replacement from the
``num_keys ** key_tokens`` possible keys); values are drawn from ``num_values`` symbols with
repetition; the ``q`` queried keys are distinct pairs of the sequence, at uniformly random
depths. After SEP the key tokens are given and only each query's value is scored, so one
sequence yields ``q`` scored answers (exact match needs all of them).

Length mapping: ``(n + q)(t + 1) + 2`` tokens per instance, so
``n = (length - 1) // (t + 1) - q`` pairs. A length that needs more pairs than there are
distinct keys is a ConfigError (raise ``num_keys`` or ``key_tokens``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from posx.errors import ConfigError
from posx.tasks.synthetic.common import Instances, SyntheticTask, digits_of


class AssociativeRecallTask(SyntheticTask):
    """Multi-query associative recall (Ba et al. 2016; Arora et al. 2023's MQAR).

    Args:
        num_keys: Key-token alphabet (ids ``0 .. num_keys - 1``).
        key_tokens: Tokens per key.
        num_values: Value alphabet (ids ``num_keys .. num_keys + num_values - 1``).
        num_queries: Queries per sequence; also the fewest pairs (``min_size`` >= this).
        min_size: Fewest pairs drawn in training.
    """

    def __init__(
        self,
        num_keys: int = 32,
        key_tokens: int = 2,
        num_values: int = 32,
        num_queries: int = 4,
        min_size: int = 4,
    ) -> None:
        if num_keys < 2 or key_tokens < 1 or num_values < 2 or num_queries < 1:
            raise ConfigError(
                "associative recall needs num_keys >= 2, key_tokens >= 1, num_values >= 2,"
                f" num_queries >= 1; got {num_keys}, {key_tokens}, {num_values}, {num_queries}"
            )
        if min_size < num_queries:
            raise ConfigError(
                f"recall needs min_size >= num_queries ({num_queries}), got {min_size}"
            )
        self.num_keys, self.key_tokens, self.num_values = num_keys, key_tokens, num_values
        self.num_queries, self.distinct_keys = num_queries, num_keys**key_tokens
        self.length_mapping = f"n = (length - 1) // {key_tokens + 1} - {num_queries} pairs"
        super().__init__(num_keys + num_values, min_size)

    def footprint(self, size: int) -> int:
        return (size + self.num_queries) * (self.key_tokens + 1) + 2

    def size_for(self, length: int) -> int:
        n = super().size_for(length)
        if n > self.distinct_keys:
            raise ConfigError(
                f"recall at length {length} needs {n} distinct keys but num_keys**key_tokens ="
                f" {self.distinct_keys}; raise task.num_keys or task.key_tokens"
            )
        return n

    def instances(self, sizes: Tensor, generator: torch.Generator) -> Instances:
        b, w, q, t = len(sizes), int(sizes.max()), self.num_queries, self.key_tokens
        keys = torch.rand(b, self.distinct_keys, generator=generator).argsort(1)[:, :w]
        values = torch.randint(self.num_values, (b, w), generator=generator) + self.num_keys
        pairs = torch.cat([digits_of(keys, t, self.num_keys), values.unsqueeze(2)], dim=2)
        # q distinct pairs among each row's first n: random keys, the invalid tail sorted last.
        pick = torch.rand(b, w, generator=generator)
        pick = pick.masked_fill(torch.arange(w) >= sizes.unsqueeze(1), 2.0).argsort(1)[:, :q]
        queries = pairs.gather(1, pick.unsqueeze(2).expand(-1, -1, t + 1))
        scored = (torch.arange(q * (t + 1)) % (t + 1) == t).expand(b, -1)
        answer_len = torch.full_like(sizes, q * (t + 1))
        return Instances(
            pairs.reshape(b, -1), sizes * (t + 1), queries.reshape(b, -1), answer_len, scored
        )
