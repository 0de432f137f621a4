"""The texts needles hide in: RULER's repeated ``noise`` sentences, an ``essay`` (the run's
corpus, cut into words for sizing and into sentences for placing needles), and the ``needle``
haystack of distractor needles (built by :mod:`posx.ruler.niah`)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
# A sentence ends at . ! or ? (a closing quote or bracket may follow) before white space.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"')\]])\s+")
# Source code and lists have few sentence ends: a run of words without one is cut into pieces
# of this many words, so a needle's depth never snaps to a place thousands of words away.
LONGEST_SENTENCE = 60


def corpus_words(text: str) -> list[str]:
    """The corpus's words: the text with every run of white space made one space, split on it."""
    return [w for w in re.sub(r"\s+", " ", text).strip().split(" ") if w]


def take_words(words: Sequence[str], n: int) -> str:
    """The first ``n`` words joined by spaces, the corpus repeated when it is shorter (as
    RULER's essay haystack is).

    Raises:
        ValueError: ``n`` words asked of an empty corpus.
    """
    if n > 0 and not words:
        raise ValueError("the corpus has no words to build a haystack from")
    return " ".join(itertools.islice(itertools.cycle(words), n)) if n > 0 else ""


def sentences(text: str) -> list[str]:
    """``text`` split into sentences (at most :data:`LONGEST_SENTENCE` words each)."""
    out: list[str] = []
    for sentence in _SENTENCE_END.split(text.strip()):
        words = sentence.split(" ")
        for start in range(0, len(words), LONGEST_SENTENCE):
            piece = " ".join(words[start : start + LONGEST_SENTENCE]).strip()
            if piece:
                out.append(piece)
    return out
