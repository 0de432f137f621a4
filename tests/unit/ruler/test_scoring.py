"""RULER's scoring, checked against the reference's definition written out here on crafted
predictions (case, control characters, several references), and the numbers posx adds."""

from __future__ import annotations

import math
import re

import pytest

from posx.ruler.scoring import (
    clean,
    effective_length,
    interval,
    match_all,
    match_part,
    score,
)


def reference_clean(text):
    # RULER's postprocess: strip, each of \x00-\x1f becomes a newline, strip
    return re.sub(r"[\x00-\x1f]", "\n", text.strip()).strip()


def reference_all(preds, refs):
    pairs = zip(preds, refs, strict=True)
    each = [sum(r.lower() in p.lower() for r in ref) / len(ref) for p, ref in pairs]
    return round(sum(each) / len(preds) * 100, 2)


def reference_part(preds, refs):
    pairs = zip(preds, refs, strict=True)
    each = [max(1.0 if r.lower() in p.lower() else 0.0 for r in ref) for p, ref in pairs]
    return round(sum(each) / len(preds) * 100, 2)


PREDS = [
    " The number is 1234567.",
    "THE ANSWER: Apple-Pie and 42",  # case differs from the reference
    "12\x0034567 is split by a NUL",  # control character inside the value
    "\t\n 9876543 \x07",  # control characters around it
    "one: alpha-beta, two: gamma-delta",  # two of three references
    "",
    "uuid 9f6e8c30-f785-4b3a-b738-897b21cfb91e",
]
REFS = [
    ["1234567"],
    ["apple-pie", "42"],
    ["1234567"],
    ["9876543"],
    ["alpha-beta", "gamma-delta", "epsilon-zeta"],
    ["1"],
    ["9F6E8C30-F785-4B3A-B738-897B21CFB91E"],
]


def test_scores_equal_the_reference_definition():
    cleaned = [reference_clean(p) for p in PREDS]
    assert score("string_match_all", PREDS, REFS) == reference_all(cleaned, REFS)
    assert score("string_match_part", PREDS, REFS) == reference_part(cleaned, REFS)
    # the crafted cases score as the definition says, one by one
    assert [match_all(p, r) for p, r in zip(PREDS, REFS, strict=True)] == [1, 1, 0, 1, 2 / 3, 0, 1]
    assert [match_part(p, r) for p, r in zip(PREDS, REFS, strict=True)] == [1, 1, 0, 1, 1, 0, 1]
    assert score("string_match_all", PREDS, REFS) == round(100 * (4 + 2 / 3) / 7, 2)


def test_cleaning_makes_control_characters_line_breaks():
    assert clean("\x01 a\x1fb \x02") == "a\nb"
    assert clean("a\x7fb") == "a\x7fb"  # DEL is not in RULER's range


def test_unknown_metric_and_no_predictions_are_errors():
    with pytest.raises(ValueError, match="unknown metric"):
        score("exact", ["a"], [["a"]])
    with pytest.raises(ValueError, match="no predictions"):
        score("string_match_all", [], [])


def test_interval_is_wilsons_and_narrows_with_samples():
    low, high = interval(100.0, 20)
    assert (low, high) == (83.89, 100.0)
    assert interval(0.0, 20) == (0.0, 16.11)
    wide, narrow = interval(50.0, 20), interval(50.0, 500)
    assert wide[0] < narrow[0] < 50 < narrow[1] < wide[1]
    assert all(math.isnan(x) for x in interval(50.0, 0))


def test_effective_length_is_the_longest_run_from_the_shortest_above_the_threshold():
    scores = {4096: 95.0, 8192: 90.0, 16384: 80.0, 32768: 88.0}
    assert effective_length(scores, 85.6) == 8192  # 32768 after a failed length does not count
    assert effective_length(scores, 79.0) == 32768
    assert effective_length(scores, 96.0) is None
    assert effective_length({512: 85.6}, 85.6) == 512  # at the threshold counts
    assert effective_length({512: math.nan, 1024: 99.0}, 85.6) is None
