"""A task's samples at a length: each sample's haystack size searched so that its prompt, in
the model's tokens, plus the task's generation budget is at most the length (within one
haystack unit of it), each deterministic from (seed, task, length, sample index)."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from posx.ruler.fit import largest
from posx.ruler.registry import task
from posx.ruler.sample import Env, Sample, depth_for


class TooShort(ValueError):
    """A length shorter than a task's smallest prompt plus its budget."""


@dataclass(frozen=True)
class Fitted:
    """A sample and its prompt's true length.

    Attributes:
        sample: The generated sample.
        tokens: Its prompt's tokens as the model reads it (input and answer prefix).
    """

    sample: Sample
    tokens: int


def sample_seed(seed: int, name: str, length: int, index: int) -> int:
    """The seed of one sample: a hash of what identifies it (so samples do not depend on one
    another, nor on how many are drawn)."""
    text = f"ruler|{seed}|{name}|{length}|{index}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big")


def build_samples(name: str, length: int, samples: int, seed: int, env: Env) -> list[Fitted]:
    """``samples`` prompts of task ``name`` filling ``length`` tokens.

    Args:
        name: A task of :data:`posx.ruler.registry.TASKS`.
        length: Prompt plus generation budget, in tokens.
        samples: How many.
        seed: The evaluation's seed.
        env: Token count and corpus (its ``length`` is replaced by ``length``).

    Returns:
        The samples, each with its prompt's token count.

    Raises:
        TooShort: Even the smallest haystack's prompt plus the budget exceeds ``length``.
        ValueError: An unknown task.
    """
    t = task(name)
    env = Env(length, env.count, env.essay)
    limit, low = length - t.budget, t.smallest(length)
    out: list[Fitted] = []
    hint = None
    for index in range(samples):
        s, depth = sample_seed(seed, name, length, index), depth_for(index, samples)
        made: dict[int, Fitted] = {}

        def tokens(size: int, s: int = s, depth: int = depth, made: dict = made) -> int:
            sample = t.make(random.Random(s), size, depth, env)
            made[size] = Fitted(sample, env.count(sample.input, sample.answer_prefix))
            return made[size].tokens

        size = largest(tokens, limit, low, hint)
        if size is None:
            need = made[low].tokens + t.budget
            raise TooShort(
                f"RULER task {name} at length {length}: its smallest prompt is "
                f"{made[low].tokens} tokens of this model, + {t.budget} to generate = {need}; "
                f"use lengths of at least {need}"
            )
        out.append(made[size])
        hint = size
    return out
