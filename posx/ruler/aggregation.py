"""RULER's aggregation tasks: common words (``cwe``) and frequent words (``fwe``).

``cwe``: a numbered list where ten words appear many times and the others few; the question asks
for the ten common ones. Below 4096 tokens each common word appears 6 times and each other once,
after an example of 20 words (3 and 1 times); from 4096 on 30 and 3 times, after an example of
40 words (10 and 3 times), as RULER does. Words come from the shipped lists
(:mod:`posx.ruler.words`); past their ~8,700 words, from adjective-noun pairs.

``fwe``: a text of coded six-letter words whose counts follow a Zipf law of exponent ``alpha``
(2.0); the most frequent is ``...`` (noise to ignore) and the answer is the next three. The
vocabulary has one word per 50 tokens of the length, as RULER's. A text too short for the
third answer word to be more frequent than the fourth non-answer word is refused by the size
search (:meth:`FrequentWords.smallest`).

The wording and answer prefixes are RULER's. Neither task has needles (no depth).
"""

from __future__ import annotations

import math
import random
import string
from dataclasses import dataclass

from posx.ruler.sample import Env, Sample
from posx.ruler.words import common_words, word_list

CWE_TEMPLATE = (
    "Below is a numbered list of words. In these words, some appear more often than others. "
    "Memorize the ones that appear most often.\n{context}\nQuestion: What are the 10 most "
    "common words in the above list?"
)
CWE_PREFIX = " Answer: The top 10 words that appear most often in the list are:"
FWE_TEMPLATE = (
    "Read the following coded text and track the frequency of each coded word. Find the three "
    "most frequently appeared coded words. {context}\nQuestion: Do not provide any explanation. "
    "Please ignore the dots '....'. What are the three most frequently appeared words in the "
    "above coded text?"
)
FWE_PREFIX = (
    " Answer: According to the coded text above, the three most frequently appeared words are:"
)
SHORT = 4096  # below this length cwe repeats its words less (RULER's switch)


def numbered(words: list[str]) -> str:
    """``1. a 2. b 3. c``."""
    return " ".join(f"{i + 1}. {w}" for i, w in enumerate(words))


def _pick(rng: random.Random, count: int) -> list[str]:
    pool = common_words()
    if count <= len(pool):
        return rng.sample(pool, count)
    out: dict[str, None] = {}
    while len(out) < count:
        out[f"{rng.choice(word_list('adjectives'))}-{rng.choice(word_list('nouns'))}"] = None
    return list(out)


@dataclass(frozen=True)
class CommonWords:
    """RULER's ``cwe``.

    Attributes:
        common: Words to find (10).
        freq_common: Times each appears from 4096 tokens on (30; 6 below).
        freq_rare: Times each other word appears (3; 1 below).
    """

    common: int = 10
    freq_common: int = 30
    freq_rare: int = 3
    budget: int = 120
    unit: str = "distinct word"

    def smallest(self, length: int) -> int:
        """The fewest distinct words: the common ones alone."""
        return self.common

    def _list(self, rng: random.Random, words: int, often: int, rarely: int) -> tuple[str, list]:
        chosen = _pick(rng, words)
        top, rest = chosen[: self.common], chosen[self.common :]
        entries = top * often + rest * rarely
        rng.shuffle(entries)
        return numbered(entries), top

    def make(self, rng: random.Random, size: int, depth: int | None, env: Env) -> Sample:
        """A prompt listing ``size`` distinct words, after one worked example.

        Args:
            rng: The sample's generator.
            size: Distinct words.
            depth: Unused (no needles).
            env: The length (the repeats change below 4096 tokens).

        Returns:
            The sample.
        """
        short = env.length < SHORT
        shape = (20, 3, 1) if short else (40, 10, 3)
        context, answer = self._list(rng, *shape)
        example = CWE_TEMPLATE.format(context=context) + CWE_PREFIX + " " + numbered(answer)
        often, rarely = (6, 1) if short else (self.freq_common, self.freq_rare)
        context, top = self._list(rng, size, often, rarely)
        return Sample(
            input=example + "\n" + CWE_TEMPLATE.format(context=context),
            answer_prefix=CWE_PREFIX,
            outputs=tuple(top),
            depth=None,
            size=size,
        )


def zeta(alpha: float, terms: int = 1000) -> float:
    """Riemann zeta at ``alpha > 1`` (a partial sum and its Euler-Maclaurin tail)."""
    head = math.fsum(k**-alpha for k in range(1, terms))
    return head + terms ** (1 - alpha) / (alpha - 1) + 0.5 * terms**-alpha


@dataclass(frozen=True)
class FrequentWords:
    """RULER's ``fwe``.

    Attributes:
        alpha: Zipf exponent of the word counts.
        letters: Letters per coded word.
    """

    alpha: float = 2.0
    letters: int = 6
    budget: int = 50
    unit: str = "coded word"

    def vocabulary_size(self, length: int) -> int:
        """Coded words for a length: one per 50 tokens left after the budget (at least 5)."""
        return max(5, (length - self.budget) // 50)

    def counts(self, words: int, vocabulary: int) -> list[int]:
        """Times the word of each rank appears in a text of about ``words`` words."""
        scale = words / zeta(self.alpha)
        return [int(scale * k**-self.alpha) for k in range(1, vocabulary + 1)]

    def smallest(self, length: int) -> int:
        """The fewest words at which the answer words (ranks 2-4) each appear more often than
        rank 5."""
        words = 1
        while (c := self.counts(words, self.vocabulary_size(length)))[3] <= c[4]:
            words += 1
        return words

    def make(self, rng: random.Random, size: int, depth: int | None, env: Env) -> Sample:
        """A coded text of about ``size`` words (Zipf counts; at least :meth:`smallest`).

        Args:
            rng: The sample's generator.
            size: Words the counts are drawn for.
            depth: Unused (no needles).
            env: The length (it sets the vocabulary).

        Returns:
            The sample.
        """
        n = self.vocabulary_size(env.length)
        vocab: dict[str, None] = {}
        while len(vocab) < n:
            vocab["".join(rng.choices(string.ascii_lowercase, k=self.letters))] = None
        coded = list(vocab)
        coded[0] = "..."  # the most frequent word is noise
        text = [w for w, c in zip(coded, self.counts(size, n), strict=True) for _ in range(c)]
        rng.shuffle(text)
        return Sample(
            input=FWE_TEMPLATE.format(context=" ".join(text)),
            answer_prefix=FWE_PREFIX,
            outputs=tuple(coded[1:4]),
            depth=None,
            size=size,
        )
