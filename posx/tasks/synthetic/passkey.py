"""Passkey retrieval: a number hidden at a random depth in filler, asked for at the end.

After Mohtashami & Jaggi 2023. The filler is a fixed repeating pattern of ``filler_tokens``
symbols (the stand-in for "The grass is green. The sky is blue. ..."), so the only
information in the prompt is the ``digits``-digit passkey after a KEY marker. Layout for
``n`` filler tokens with the key at depth ``d`` (``0 <= d <= n``)::

    BOS f_0 .. f_{d-1} KEY k_1 .. k_D f_d .. f_{n-1} SEP k_1 .. k_D

Training draws ``d`` uniformly; eval sets spread depths evenly over ``[0, n]``
(sequence ``i`` of ``N`` at depth ``round((i + 0.5) / N * n)``), so every depth bucket gets the
same number of sequences. :meth:`PasskeyTask.sequence_metrics` reports exact match per depth
bucket as columns ``acc_depth_<lo>_<hi>`` (percent of the filler before the key).

Length mapping: ``n + 2D + 3`` tokens per instance, so ``n = length - 2 - 2D`` filler tokens.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from posx.errors import ConfigError
from posx.tasks.base import Batch
from posx.tasks.synthetic.common import Instances, SyntheticTask, assemble, eval_generator

BASE = 10


class PasskeyTask(SyntheticTask):
    """Retrieve a ``digits``-digit passkey from filler; digits are ids 0-9.

    Args:
        digits: Passkey digits ``D``.
        filler_tokens: Period of the filler pattern (ids ``10 .. 9 + filler_tokens``).
        depth_buckets: Number of equal depth buckets in :meth:`sequence_metrics`.
        min_size: Fewest filler tokens drawn in training.
    """

    def __init__(
        self, digits: int = 5, filler_tokens: int = 8, depth_buckets: int = 5, min_size: int = 1
    ) -> None:
        if digits < 1 or filler_tokens < 1 or depth_buckets < 1:
            raise ConfigError(
                "passkey needs digits, filler_tokens, depth_buckets >= 1;"
                f" got {digits}, {filler_tokens}, {depth_buckets}"
            )
        self.digits, self.filler_tokens, self.depth_buckets = digits, filler_tokens, depth_buckets
        self.key = BASE + filler_tokens
        self.length_mapping = f"n = length - {2 + 2 * digits} filler tokens"
        super().__init__(BASE + filler_tokens + 1, min_size)

    def footprint(self, size: int) -> int:
        return size + 2 * self.digits + 3

    def layout(self, sizes: Tensor, depth: Tensor, generator: torch.Generator) -> Instances:
        """Instances with ``sizes [b]`` filler tokens and the key after ``depth [b]`` of them."""
        b, w, k = len(sizes), int(sizes.max()) + 1 + self.digits, self.digits
        passkey = torch.randint(BASE, (b, k), generator=generator)
        j = torch.arange(w).expand(b, -1)
        d = depth.unsqueeze(1)
        filler_index = torch.where(j < d, j, j - k - 1)
        prompt = BASE + filler_index % self.filler_tokens
        in_key = (j > d) & (j <= d + k)
        prompt = torch.where(in_key, passkey.gather(1, (j - d - 1).clamp(0, k - 1)), prompt)
        prompt = torch.where(j == d, self.key, prompt)
        return Instances(prompt, sizes + 1 + k, passkey, torch.full_like(sizes, k))

    def instances(self, sizes: Tensor, generator: torch.Generator) -> Instances:
        depth = (torch.rand(len(sizes), generator=generator) * (sizes + 1)).long().clamp(max=sizes)
        return self.layout(sizes, depth, generator)

    def eval_set(self, length: int, num_sequences: int, seed: int) -> Batch:
        n = self.size_for(length)
        sizes = torch.full((num_sequences,), n)
        fraction = (torch.arange(num_sequences) + 0.5) / num_sequences
        depth = (fraction * n).round().long()
        inst = self.layout(sizes, depth, eval_generator(seed, length))
        return assemble(inst, length, self.pad, self.bos, self.sep)

    def depth_fraction(self, inputs: Tensor) -> Tensor:
        """Share of the filler before the key, ``[b]`` in ``[0, 1]``, from ``inputs [b, s]``."""
        key_at = (inputs == self.key).int().argmax(1)  # the key's input index = depth + 1
        filler = ((inputs >= BASE) & (inputs < self.key)).sum(1)
        return (key_at - 1) / filler.clamp(min=1)

    def bucket_names(self) -> list[str]:
        edges = [round(100 * i / self.depth_buckets, 1) for i in range(self.depth_buckets + 1)]
        return [f"acc_depth_{lo:g}_{hi:g}" for lo, hi in zip(edges, edges[1:], strict=False)]

    def sequence_metrics(self, data: Batch, correct: Tensor) -> dict[str, float]:
        """Exact match per depth bucket: ``acc_depth_0_20`` .. ``acc_depth_80_100`` for 5."""
        bucket = (self.depth_fraction(data.inputs) * self.depth_buckets).long()
        bucket = bucket.clamp(max=self.depth_buckets - 1).to(correct.device)
        out = {}
        for i, name in enumerate(self.bucket_names()):
            hits = correct[bucket == i]
            out[name] = hits.float().mean().item() if len(hits) else math.nan
        return out
