"""The English word lists RULER's tasks draw keys and common words from, shipped with posx.

They are the noun, adjective and verb lists of the ``wonderwords`` package (3.0.1, MIT licence,
``words/LICENSE-wonderwords.txt``), the lists RULER itself reads, stored in ``words/`` so
nothing is downloaded or imported at run time; entries of several words and those on
wonderwords' own profanity list were left out when the files were written.
"""

from __future__ import annotations

import functools
from importlib import resources

KINDS = ("nouns", "adjectives", "verbs")


@functools.cache
def word_list(kind: str) -> tuple[str, ...]:
    """The shipped list ``kind`` (one of :data:`KINDS`), sorted.

    Raises:
        ValueError: An unknown kind.
    """
    if kind not in KINDS:
        raise ValueError(f"no word list {kind!r}; the lists are {', '.join(KINDS)}")
    text = resources.files("posx.ruler").joinpath("words", f"{kind}.txt").read_text("utf-8")
    return tuple(w for w in text.splitlines() if w)


@functools.cache
def common_words() -> tuple[str, ...]:
    """Nouns, adjectives and verbs together, each once, sorted (the pool of ``cwe``)."""
    return tuple(sorted(set(word_list("nouns")) | set(word_list("adjectives"))
                        | set(word_list("verbs"))))  # fmt: skip
