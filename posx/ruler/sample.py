"""One generated prompt of a RULER task, and what a task builds it from."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# RULER's 40 needle depths, in percent: 0 to 100 evenly spaced, rounded to whole percents.
DEPTHS: tuple[int, ...] = tuple(round(100 * i / 39) for i in range(40))


@dataclass(frozen=True)
class Sample:
    """One prompt and its references.

    Attributes:
        input: The task's text up to its answer prefix.
        answer_prefix: The words the model's answer continues (the prompt ends with them).
        outputs: The strings a right answer contains; each is scored.
        depth: The queried needle's depth in percent; None for a task without needles.
        size: Haystack units the text holds (words, sentences, lines or list entries).
        needle_depths: Every needle's depth in percent (distractors and queried ones).
    """

    input: str
    answer_prefix: str
    outputs: tuple[str, ...]
    depth: int | None
    size: int
    needle_depths: tuple[int, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Env:
    """What a task may read besides its random generator.

    Attributes:
        length: The prompt length being filled, in tokens (some tasks change with it, as
            RULER's do below 4096).
        count: Tokens of a prompt (its input and answer prefix) as the model reads it.
        essay: The corpus's words, in order (the ``essay`` haystack).
    """

    length: int
    count: Callable[[str, str], int]
    essay: Sequence[str] = ()


def depth_for(index: int, samples: int) -> int:
    """The depth sample ``index`` of ``samples`` puts its queried needle at: the 40 depths
    spread evenly over the samples (every depth once per 40 samples, in order)."""
    return DEPTHS[(index * len(DEPTHS)) // max(samples, 1) % len(DEPTHS)]


def insert_at_depths(units: list[str], needles: Sequence[tuple[str, int]]) -> list[str]:
    """``units`` with each ``(needle, depth)`` placed after ``int(len(units) * depth / 100)``
    units (needles at one place keep their order)."""
    n = len(units)
    at = sorted(((int(n * depth / 100), i) for i, (_, depth) in enumerate(needles)))
    out: list[str] = []
    start = 0
    for position, i in at:
        out += units[start:position]
        out.append(needles[i][0])
        start = position
    return out + units[start:]
