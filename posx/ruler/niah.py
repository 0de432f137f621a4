"""Needle in a haystack, RULER's eight variants: keys and values hidden as needle sentences in
a haystack of repeated noise, an essay, or distractor needles, and a question naming keys.

A needle says ``One of the special magic numbers for KEY is: VALUE.``; keys are adjective-noun
words, values 7-digit numbers, or either UUIDs (:func:`draw`). A sample draws its keys and
values, then its haystack (whose size the caller fits to a length, :mod:`posx.ruler.fit`),
and puts its needles at depths: the first queried needle at the depth the caller asks for
(:func:`posx.ruler.sample.depth_for` spreads RULER's 40 depths over the samples), every other
needle at a different one of the 40, drawn. The prompt wording and answer prefix are RULER's
(singular when one value is asked for), so scores compare with published ones.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass

from posx.ruler.haystack import NOISE, sentences, take_words
from posx.ruler.sample import DEPTHS, Env, Sample, insert_at_depths
from posx.ruler.words import word_list

NEEDLE = "One of the special magic {kind} for {key} is: {value}."
_PLURAL = (
    "Some special magic {kind} are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {kind} afterwards.\n{context}\n"
    "What are all the special magic {kind} for {query} mentioned in the provided text?",
    " The special magic {kind} for {query} mentioned in the provided text are",
)
_SINGULAR = (
    "A special magic {kind} is hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {kind} afterwards.\n{context}\n"
    "What is the special magic {kind} for {query} mentioned in the provided text?",
    " The special magic {kind} for {query} mentioned in the provided text is",
)
HAYSTACKS = ("noise", "essay", "needle")
KINDS = ("words", "numbers", "uuids")


def draw(kind: str, rng: random.Random) -> str:
    """A random key or value of ``kind``: an ``adjective-noun`` pair, a 7-digit number, or a
    version-4 UUID."""
    if kind == "words":
        return f"{rng.choice(word_list('adjectives'))}-{rng.choice(word_list('nouns'))}"
    if kind == "numbers":
        return str(rng.randint(10**6, 10**7 - 1))
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def joined(items: list[str]) -> str:
    """``a``, ``a, and b``, ``a, b, and c`` (RULER's list of queried keys)."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + ", and " + items[-1]


@dataclass(frozen=True)
class Niah:
    """One needle-in-a-haystack variant.

    Attributes:
        haystack: ``noise``, ``essay`` (the corpus; size in words) or ``needle`` (distractor
            needles; size in needles).
        key_kind: ``words``, ``numbers`` or ``uuids``.
        value_kind: The same kinds, for values.
        keys: Keys hidden (at least ``queries``).
        values: Values per key, each its own needle.
        queries: Keys the question names; every value of each is an answer.
    """

    haystack: str
    key_kind: str = "words"
    value_kind: str = "numbers"
    keys: int = 1
    values: int = 1
    queries: int = 1
    budget: int = 128

    @property
    def unit(self) -> str:
        """What one unit of haystack size is."""
        return {"noise": "noise paragraph", "essay": "word", "needle": "distractor needle"}[
            self.haystack
        ]

    def smallest(self, length: int) -> int:
        """The fewest haystack units: one."""
        return 1

    def make(self, rng: random.Random, size: int, depth: int | None, env: Env) -> Sample:
        """A prompt with ``size`` haystack units and its first queried needle at ``depth``.

        Args:
            rng: The sample's generator (a fresh one of the same seed for every size tried).
            size: Haystack units.
            depth: Percent depth of the first queried needle.
            env: The corpus (``essay``) and length.

        Returns:
            The sample.
        """
        n_keys = max(self.keys, self.queries)
        keys = [draw(self.key_kind, rng) for _ in range(n_keys)]
        values = [[draw(self.value_kind, rng) for _ in range(self.values)] for _ in keys]
        asked = rng.sample(range(n_keys), self.queries)
        first = depth if depth is not None else rng.choice(DEPTHS)
        others = rng.sample([d for d in DEPTHS if d != first], n_keys * self.values - 1)
        order = [asked[0]] + [k for k in range(n_keys) if k != asked[0]]
        needles, depths = [], [first, *others]
        for k in order:
            for value in values[k]:
                text = NEEDLE.format(kind=self.value_kind, key=keys[k], value=value)
                needles.append((text, depths[len(needles)]))
        units = self._units(rng, size, env, set(keys))
        if self.haystack == "essay":
            context = " ".join(insert_at_depths(units, needles))
        else:
            context = "\n".join(insert_at_depths(units, needles))
        single = self.queries * self.values == 1
        template, prefix = _SINGULAR if single else _PLURAL
        kind = self.value_kind[:-1] if single else self.value_kind
        query = joined([keys[k] for k in asked])
        return Sample(
            input=template.format(kind=kind, context=context, query=query),
            answer_prefix=prefix.format(kind=kind, query=query),
            outputs=tuple(v for k in asked for v in values[k]),
            depth=first,
            size=size,
            needle_depths=tuple(depths),
        )

    def _units(self, rng: random.Random, size: int, env: Env, keys: set[str]) -> list[str]:
        if self.haystack == "noise":
            return [NOISE] * size
        if self.haystack == "essay":
            return sentences(take_words(env.essay, size))
        out = []
        while len(out) < size:
            key = draw(self.key_kind, rng)
            if key not in keys:  # a distractor never repeats a real key
                value = draw(self.value_kind, rng)
                out.append(NEEDLE.format(kind=self.value_kind, key=key, value=value))
        return out
