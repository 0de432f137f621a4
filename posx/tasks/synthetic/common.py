"""Machinery shared by every synthetic task: layout, special tokens, answer mask, seeded sizes.

Every instance is laid out as ``BOS prompt SEP answer PAD ...`` in ``length + 1`` tokens (the
last one is only ever a target). A task only says how to draw prompts and answers for a batch
of instance sizes (:meth:`SyntheticTask.instances`) and how many tokens an instance of size
``n`` occupies (:meth:`SyntheticTask.footprint`); this module turns that into a padded
:class:`~posx.tasks.base.Batch` whose mask covers the answer tokens only.

Length mapping: the instance size for a sequence of ``length`` input tokens is the largest
``n`` with ``footprint(n) <= length + 1``. Training draws each sequence's size uniformly from
``[min_size, size_for(length)]`` (the NoPE protocol); evaluation uses ``size_for(length)``
for every sequence, on instances seeded by ``(seed, length)`` alone, so every run of a task
sees the same instances at a given length.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

import torch
from torch import Tensor

from posx.errors import ConfigError, PosxError
from posx.tasks.base import Batch, Task


@dataclass
class Instances:
    """Prompts and answers of one batch, right-padded to the batch's widest row.

    Attributes:
        prompt: Token ids ``[b, P]``; row ``i`` uses its first ``prompt_len[i]`` entries.
        prompt_len: ``[b]`` prompt lengths.
        answer: Token ids ``[b, A]``; row ``i`` uses its first ``answer_len[i]`` entries.
        answer_len: ``[b]`` answer lengths.
        scored: Optional bool ``[b, A]``: which answer tokens are scored (default all). Tasks
            whose answer segment interleaves given cues with answers (recall queries) use it.
    """

    prompt: Tensor
    prompt_len: Tensor
    answer: Tensor
    answer_len: Tensor
    scored: Tensor | None = None


def eval_generator(seed: int, length: int) -> torch.Generator:
    """The generator of the eval set at ``length``: a function of ``(seed, length)`` only."""
    return torch.Generator().manual_seed(seed * 1_000_003 + length)


def prefix_mask(lengths: Tensor, width: int) -> Tensor:
    """Bool ``[b, width]``: True in the first ``lengths[i]`` columns of row ``i``."""
    return torch.arange(width) < lengths.unsqueeze(1)


def reverse_prefix(x: Tensor, lengths: Tensor) -> Tensor:
    """Reverses the first ``lengths[i]`` entries of each row of ``x [b, w]`` (rest: garbage)."""
    idx = (lengths.unsqueeze(1) - 1 - torch.arange(x.shape[1])).clamp(min=0)
    return x.gather(1, idx)


def digits_of(values: Tensor, width: int, base: int = 10) -> Tensor:
    """Digits of ``values [...]``, most significant first, zero-padded: ``[..., width]``."""
    powers = base ** torch.arange(width - 1, -1, -1)
    return (values.unsqueeze(-1) // powers) % base


def join_items(items: Tensor, count: Tensor, sep: int | None) -> tuple[Tensor, Tensor]:
    """Flattens ``items [b, n, w]`` into rows of ``count[i]`` items, ``sep`` between items.

    Returns:
        ``(tokens [b, n * (w + 1)], lengths [b])``; without ``sep`` items are concatenated.
    """
    b, n, w = items.shape
    if sep is None:
        return items.reshape(b, n * w), count * w
    sep_col = torch.full((b, n, 1), sep, dtype=items.dtype)
    return torch.cat([items, sep_col], dim=2).reshape(b, n * (w + 1)), count * (w + 1) - 1


def assemble(inst: Instances, length: int, pad: int, bos: int, sep: int) -> Batch:
    """Lays out ``BOS prompt SEP answer`` padded with PAD to ``length + 1`` tokens.

    Returns:
        A batch of ``[b, length]`` inputs and targets; ``mask`` is True exactly on the targets
        that are (scored) answer tokens.
    """
    b = inst.prompt.shape[0]
    p, a = inst.prompt_len.unsqueeze(1), inst.answer_len.unsqueeze(1)
    if int((p + a).max()) + 2 > length + 1:  # size_for() guarantees this; a bug otherwise
        raise PosxError(f"instance of {int((p + a).max()) + 2} tokens exceeds length {length}")
    idx = torch.arange(length + 1).expand(b, -1)
    in_prompt = (idx >= 1) & (idx <= p)
    in_answer = (idx >= p + 2) & (idx < p + 2 + a)
    p_src = (idx - 1).clamp(0, inst.prompt.shape[1] - 1)
    a_src = (idx - p - 2).clamp(0, inst.answer.shape[1] - 1)
    seq = torch.full((b, length + 1), pad, dtype=torch.long)
    seq = torch.where(in_prompt, inst.prompt.long().gather(1, p_src), seq)
    seq = torch.where(in_answer, inst.answer.long().gather(1, a_src), seq)
    seq[:, 0] = bos
    seq.scatter_(1, p + 1, sep)
    mask = in_answer if inst.scored is None else in_answer & inst.scored.gather(1, a_src)
    return Batch(seq[:, :-1], seq[:, 1:], mask[:, 1:])


class SyntheticTask(Task):
    """A task with exact answers; subclasses define footprint, instances and the mapping text.

    Token ids ``0 .. num_tokens - 1`` are the task's own; PAD, BOS and SEP follow them.

    Args:
        num_tokens: Number of task tokens (symbols, digits, operators).
        min_size: Smallest instance size drawn in training.
    """

    exact_match = True
    #: ``length -> instance size`` in words, recorded in ``run.json`` and shown in docs.
    length_mapping: str = ""
    #: The smallest ``min_size`` the task is defined for.
    smallest_size: int = 1

    def __init__(self, num_tokens: int, min_size: int) -> None:
        name = type(self).__name__
        if min_size < self.smallest_size:
            raise ConfigError(f"{name} needs min_size >= {self.smallest_size}, got {min_size}")
        self.num_tokens, self.min_size = num_tokens, min_size
        self.pad, self.bos, self.sep = num_tokens, num_tokens + 1, num_tokens + 2
        self.vocab_size = num_tokens + 3

    @abstractmethod
    def footprint(self, size: int) -> int:
        """Tokens (BOS, prompt, SEP, answer) an instance of ``size`` needs; monotone in size."""

    @abstractmethod
    def instances(self, sizes: Tensor, generator: torch.Generator) -> Instances:
        """Random instances of sizes ``sizes [b]`` drawn from ``generator``."""

    def size_for(self, length: int) -> int:
        """The largest instance size that fits ``length`` input tokens."""
        need = self.footprint(self.min_size) - 1
        if length < need:
            raise ConfigError(
                f"{type(self).__name__} with min_size={self.min_size} needs length >= {need},"
                f" got {length}"
            )
        lo, hi = self.min_size, max(self.min_size, self.size_bound(length))
        while lo < hi:  # largest n in [lo, hi] with footprint(n) <= length + 1
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self.footprint(mid) <= length + 1 else (lo, mid - 1)
        return lo

    def size_bound(self, length: int) -> int:
        """An upper bound on :meth:`size_for`: every task whose instances grow by at least a
        token per size step stays within ``length + 1``."""
        return length + 1

    def make(self, sizes: Tensor, length: int, generator: torch.Generator) -> Batch:
        """Instances of ``sizes [b]`` laid out in ``length`` input tokens."""
        return assemble(self.instances(sizes, generator), length, self.pad, self.bos, self.sep)

    def train_batch(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        top = self.size_for(length)
        sizes = torch.randint(self.min_size, top + 1, (batch_size,), generator=generator)
        return self.make(sizes, length, generator)

    def eval_set(self, length: int, num_sequences: int, seed: int) -> Batch:
        sizes = torch.full((num_sequences,), self.size_for(length))
        return self.make(sizes, length, eval_generator(seed, length))

    def chance(self, data: Batch) -> float:
        """The share of ``data``'s sequences whose answer is the most common one.

        That is what the best constant answer scores, e.g. about 0.5 for parity or for Dyck
        (a little more: random strings are mostly unbalanced). Computed only where every answer
        is one scored token (its values are few, so the eval set measures their frequencies);
        an answer of several tokens has so many values that a blind guess scores about 0.
        """
        per_sequence = data.mask.sum(1)  # [n] scored tokens per sequence
        if len(per_sequence) == 0 or not bool((per_sequence == 1).all()):
            return 0.0
        answers = data.targets[data.mask]  # [n], one per sequence
        return int(answers.bincount().max()) / len(answers)

    def describe(self) -> dict[str, object]:
        return {
            "length_mapping": self.length_mapping,
            "min_size": self.min_size,
            "vocab": self.vocab_size,
        }


class StringTask(SyntheticTask):
    """Prompt: a random string of ``n`` symbols; answer: a rearrangement of it.

    Subclasses give the rearrangement as source indices (:meth:`answer_index`).

    Args:
        num_symbols: Alphabet size (symbols are ids ``0 .. num_symbols - 1``).
        min_size: Smallest string length drawn in training.
    """

    def __init__(self, num_symbols: int = 16, min_size: int = 1) -> None:
        if num_symbols < 2:
            raise ConfigError(f"{type(self).__name__} needs num_symbols >= 2, got {num_symbols}")
        self.num_symbols = num_symbols
        super().__init__(num_symbols, min_size)

    @abstractmethod
    def answer_index(self, sizes: Tensor) -> tuple[Tensor, Tensor]:
        """``(index [b, A], answer_len [b])``: answer token ``j`` is ``string[index[:, j]]``."""

    def instances(self, sizes: Tensor, generator: torch.Generator) -> Instances:
        string = torch.randint(
            self.num_symbols, (len(sizes), int(sizes.max())), generator=generator
        )
        index, answer_len = self.answer_index(sizes)
        answer = string.gather(1, index.clamp(0, string.shape[1] - 1))
        return Instances(string, sizes, answer, answer_len)
