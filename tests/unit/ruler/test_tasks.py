"""RULER's tasks as posx generates them: RULER's settings, deterministic from the seed, needles
at the depths asked for, answers in the text, and the size search's edge (counted here in
words; the model-token version is tests/unit/pretrained/test_ruler.py)."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from posx.ruler.build import TooShort, build_samples, sample_seed
from posx.ruler.fit import largest
from posx.ruler.haystack import NOISE, corpus_words, sentences, take_words
from posx.ruler.niah import NEEDLE
from posx.ruler.registry import TASKS, parse_tasks, task
from posx.ruler.sample import DEPTHS, Env, depth_for
from tests.unit.ruler.oracle import answer

ESSAY = (
    corpus_words(
        "Alice was beginning to get very tired of sitting by her sister on the bank. Once or twice "
        "she had peeped into the book her sister was reading! But it had no pictures in it? And "
        "what is the use of a book, thought Alice, without pictures or conversations. "
    )
    * 40
)


def words(text: str, prefix: str) -> int:
    return len((text + prefix).split())


def env(length: int) -> Env:
    return Env(length, words, ESSAY)


def test_the_eleven_tasks_and_their_budgets_are_rulers():
    assert list(TASKS) == [
        "niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
        "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe",
    ]  # fmt: skip
    budgets = {name: t.budget for name, t in TASKS.items()}
    assert budgets == {**{n: 128 for n in TASKS if n.startswith("niah")}, "vt": 30, "cwe": 120,
                       "fwe": 50}  # fmt: skip
    assert len(DEPTHS) == 40 and DEPTHS[0] == 0 and DEPTHS[-1] == 100 and DEPTHS[1] == 3


def test_unknown_task_names_are_refused_with_the_list():
    with pytest.raises(ValueError, match="unknown RULER task 'niah'; the tasks are niah_single_1"):
        parse_tasks("niah_single_1,niah")
    assert parse_tasks("vt,niah_single_1") == ["niah_single_1", "vt"]
    assert parse_tasks(None) == list(TASKS) == parse_tasks("all")


@pytest.mark.parametrize("name", list(TASKS))
def test_samples_are_deterministic_and_the_oracle_reads_their_answer(name):
    one = build_samples(name, 2000, 3, seed=7, env=env(0))
    two = build_samples(name, 2000, 3, seed=7, env=env(0))
    other = build_samples(name, 2000, 3, seed=8, env=env(0))
    assert one == two and one != other
    for fitted in one:
        s = fitted.sample
        assert fitted.tokens + task(name).budget <= 2000
        got = answer(s.input + s.answer_prefix)
        assert all(o.lower() in got.lower() for o in s.outputs), (got, s.outputs)
        assert all(o in s.input for o in s.outputs if name != "vt")


@pytest.mark.parametrize("name", list(TASKS))
def test_the_size_is_the_last_that_fits(name):
    t = task(name)
    for length in (600, 1500, 5000):
        for i, fitted in enumerate(build_samples(name, length, 2, 0, env(0))):
            seed, depth = sample_seed(0, name, length, i), depth_for(i, 2)
            bigger = t.make(random.Random(seed), fitted.sample.size + 1, depth, env(length))
            assert fitted.tokens + t.budget <= length
            assert words(bigger.input, bigger.answer_prefix) + t.budget > length


def test_a_length_below_the_smallest_prompt_says_what_it_needs():
    with pytest.raises(TooShort, match=r"RULER task cwe at length 100: .* use lengths of at least"):
        build_samples("cwe", 100, 1, 0, env(0))


def _before(context: str, needle_start: str, sep: str) -> int:
    return context[: context.index(needle_start)].count(sep)


@pytest.mark.parametrize("depth", [0, 3, 51, 97, 100])
def test_needles_sit_at_the_depth_asked_for(depth):
    rng = random.Random
    # noise: whole noise paragraphs before the needle
    s = task("niah_single_1").make(rng(1), 33, depth, env(0))
    assert s.depth == depth and s.input.count(NOISE) == 33
    assert _before(s.input, "One of the special", NOISE) == int(33 * depth / 100)
    # distractor needles: as many before the queried one as the depth says
    s = task("niah_multikey_2").make(rng(1), 33, depth, env(0))
    key = re.search(r"for (\S+) mentioned", s.answer_prefix).group(1)
    lines = s.input.split("\n")
    at = next(i for i, line in enumerate(lines) if f"for {key} is:" in line)
    assert at - 1 == int(33 * depth / 100)  # line 0 is the instruction
    assert sum(line.startswith("One of the special") for line in lines) == 34
    # essay: whole sentences of the corpus before the needle
    s = task("niah_single_2").make(rng(1), 400, depth, env(0))
    total = len(sentences(take_words(ESSAY, 400)))
    text = s.input.split("\n")[1]
    assert len(sentences(text[: text.index("One of the special")])) == int(total * depth / 100)
    # vt: the chain's first line after as many noise lines
    s = task("vt").make(rng(1), 33, depth, env(3000))
    main = s.input[s.input.rindex("Memorize") :]
    value_line = re.search(r"VAR \w+ = \d+", main).group(0)
    assert _before(main, value_line, NOISE) == int(33 * depth / 100)


def test_depths_spread_evenly_over_the_samples():
    assert [depth_for(i, 40) for i in range(40)] == list(DEPTHS)
    assert [depth_for(i, 4) for i in range(4)] == [DEPTHS[0], DEPTHS[10], DEPTHS[20], DEPTHS[30]]


def test_niah_variants_hide_rulers_numbers_of_needles():
    def needles(name):
        s = task(name).make(random.Random(3), 300, 50, env(0))
        return s, re.findall(r"One of the special magic (\w+) for (\S+) is: (\S+)\.", s.input)

    s, found = needles("niah_multikey_1")
    assert len(found) == 4 and len({k for _, k, _ in found}) == 4 and len(s.outputs) == 1
    s, found = needles("niah_multivalue")
    assert len(found) == 4 and len({k for _, k, _ in found}) == 1 and len(s.outputs) == 4
    assert s.input.startswith("Some special magic numbers are hidden")
    assert s.answer_prefix.endswith("mentioned in the provided text are")
    s, found = needles("niah_multiquery")
    assert len(found) == 4 and len(s.outputs) == 4 and ", and " in s.answer_prefix
    s, found = needles("niah_single_3")
    assert len(found) == 1 and re.fullmatch(r"[0-9a-f-]{36}", s.outputs[0])
    assert s.input.startswith("A special magic uuid is hidden")
    s, found = needles("niah_single_1")
    assert re.fullmatch(r"[1-9]\d{6}", s.outputs[0]) and re.fullmatch(r"[a-z]+-[a-z]+", found[0][1])
    s = task("niah_multikey_3").make(random.Random(3), 20, 50, env(0))
    assert s.input.count("One of the special magic uuids for") == 21
    assert NEEDLE.startswith("One of the special magic {kind} for {key} is: {value}.")


def test_cwe_and_fwe_counts_follow_ruler():
    s = task("cwe").make(random.Random(0), 50, None, env(8000))
    main = s.input[s.input.rindex("Below is") :]
    counts = Counter(re.findall(r"\d+\. (\S+)", main))
    assert sorted(counts[w] for w in s.outputs) == [30] * 10
    assert len(counts) == 50 and set(counts.values()) == {30, 3}
    short = task("cwe").make(random.Random(0), 50, None, env(2000))
    counts = Counter(re.findall(r"\d+\. (\S+)", short.input[short.input.rindex("Below is") :]))
    assert set(counts.values()) == {6, 1}
    s = task("fwe").make(random.Random(0), 2000, None, env(4096))
    body = Counter(s.input.split("coded words. ")[1].split("\nQuestion")[0].split())
    ranked = [w for w, _ in body.most_common()]
    assert ranked[0] == "..." and tuple(ranked[1:4]) == s.outputs
    assert len(body) <= (4096 - 50) // 50


def test_the_search_lands_on_the_edge_whatever_the_hint():
    def tokens(n):
        return 7 + 3 * n + (n % 4 == 0)

    for hint in (None, 0, 5, 100, 10_000):
        s = largest(tokens, 200, 1, hint)
        assert tokens(s) <= 200 < tokens(s + 1)
    assert largest(tokens, 5, 1) is None
