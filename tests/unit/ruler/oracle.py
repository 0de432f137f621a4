"""A model that cannot be wrong: it reads the answer out of a RULER prompt's text (the needles
the question asks for, the variable chain, the most common words) as a perfect reader would.
Scoring 100 with it shows the prompts hold their answers and the references name them."""

from __future__ import annotations

import re
from collections import Counter


def _niah(text: str) -> str:
    query = re.search(r"The special magic \w+ for (.+) mentioned in the provided text (?:is|are)$",
                      text.rstrip())  # fmt: skip
    assert query, text[-300:]
    keys = re.split(r", and |, ", query.group(1))
    found = []
    for key in keys:
        found += re.findall(rf"One of the special magic \w+ for {re.escape(key)} is: (\S+)\.", text)
    return " ".join(found)


def _vt(text: str) -> str:
    main = text[text.rindex("Memorize and track") :]
    value = re.search(r"assigned the value (\d+), they are: $", main).group(1)
    names = re.findall(rf"VAR (\w+) = {value}\b", main)
    chain = list(names)
    while True:
        after = [m for m in re.findall(r"VAR (\w+) = VAR (\w+)", main) if m[1] in chain]
        new = [a for a, _ in after if a not in chain]
        if not new:
            return " ".join(chain)
        chain += new


def _cwe(text: str) -> str:
    main = text[text.rindex("Below is a numbered list") :]
    words = re.findall(r"\d+\. (\S+)", main[: main.index("\nQuestion")])
    return " ".join(f"{i + 1}. {w}" for i, (w, _) in enumerate(Counter(words).most_common(10)))


def _fwe(text: str) -> str:
    body = text[text.index("coded words. ") + len("coded words. ") : text.index("\nQuestion")]
    counts = Counter(w for w in body.split() if w != "...")
    return " ".join(w for w, _ in counts.most_common(3))


def answer(text: str) -> str:
    """The right answer to a RULER prompt, read from its text."""
    if "special magic" in text:
        return _niah(text)
    if "chain(s) of variable assignment" in text:
        return _vt(text)
    if "numbered list of words" in text:
        return _cwe(text)
    return _fwe(text)
