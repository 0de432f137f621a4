r"""RULER's scoring: a prediction is cleaned (stripped; every control character ``\x00-\x1f``
made a line break, stripped again) and each reference is looked for in it as a
case-insensitive substring.

``string_match_all`` scores a sample by the fraction of its references found (every one needed
for full marks: the tasks that ask for several values, variables or words); ``string_match_part``
by whether any is found. A task's score is the mean over samples in percent. posx adds what a
table of them needs: a 95% interval per score (Wilson's, from the sample count: 20 samples at
100 read as [83.9, 100], not as 500 would), the average over tasks, and the **effective
length**: the longest length at which the average, and the average at every shorter length
tested, is at least a threshold (85.6 in RULER, Llama-2-7B's score at 4k).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence

_CONTROL = re.compile(r"[\x00-\x1f]")
THRESHOLD = 85.6
Z95 = 1.959964


def clean(prediction: str) -> str:
    """A prediction as RULER scores it: stripped, control characters made line breaks,
    stripped again."""
    return _CONTROL.sub("\n", prediction.strip()).strip()


def match_all(prediction: str, references: Sequence[str]) -> float:
    """The fraction of ``references`` found in the cleaned prediction (case-insensitive)."""
    text = clean(prediction).lower()
    return sum(r.lower() in text for r in references) / len(references)


def match_part(prediction: str, references: Sequence[str]) -> float:
    """1.0 when any reference is found in the cleaned prediction (case-insensitive), else 0.0."""
    text = clean(prediction).lower()
    return float(any(r.lower() in text for r in references))


METRICS = {"string_match_all": match_all, "string_match_part": match_part}


def score(metric: str, predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """A task's score in percent, rounded to 2 decimals as RULER reports it.

    Raises:
        ValueError: An unknown metric, or no predictions.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose from {', '.join(METRICS)}")
    if not predictions:
        raise ValueError("no predictions to score")
    each = [METRICS[metric](p, r) for p, r in zip(predictions, references, strict=True)]
    return round(100 * math.fsum(each) / len(each), 2)


def interval(mean: float, samples: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's 95% interval for a score ``mean`` in percent over ``samples`` samples (exact in
    form for right/wrong samples; for partial credit it treats the mean as a proportion)."""
    if samples <= 0:
        return (math.nan, math.nan)
    p = min(max(mean / 100, 0.0), 1.0)
    denom = 1 + z * z / samples
    centre = (p + z * z / (2 * samples)) / denom
    half = z * math.sqrt(p * (1 - p) / samples + z * z / (4 * samples * samples)) / denom
    return (round(100 * max(0.0, centre - half), 2), round(100 * min(1.0, centre + half), 2))


def average(scores: Iterable[float]) -> float:
    """The mean of task scores (NaN without any)."""
    values = [s for s in scores if not math.isnan(s)]
    return math.fsum(values) / len(values) if values else math.nan


def effective_length(by_length: Mapping[int, float], threshold: float = THRESHOLD) -> int | None:
    """The longest length whose average, and every shorter length's, is at least ``threshold``
    (None: not even the shortest)."""
    found = None
    for length in sorted(by_length):
        if not by_length[length] >= threshold:
            break
        found = length
    return found
