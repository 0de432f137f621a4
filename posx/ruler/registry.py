"""RULER's eleven tasks that need no download, by name: each a generator with its generation
budget (tokens the model may write) and metric.

Their settings are RULER's ``synthetic.yaml``: the needle kinds, counts and haystacks of the
eight NIAH variants, ``vt`` with one chain of four hops, ``cwe`` with 10 common words (30 and
3 repeats) and ``fwe`` with a Zipf exponent of 2. The two QA tasks need SQuAD and HotpotQA and
are not here. Every task is scored with ``string_match_all`` (:mod:`posx.ruler.scoring`).
"""

from __future__ import annotations

import random
from typing import Protocol

from posx.ruler.aggregation import CommonWords, FrequentWords
from posx.ruler.niah import Niah
from posx.ruler.sample import Env, Sample
from posx.ruler.variable_tracking import VariableTracking


class Task(Protocol):
    """What every RULER task offers."""

    budget: int
    unit: str

    def smallest(self, length: int) -> int:
        """The fewest haystack units a prompt for ``length`` may have."""
        ...

    def make(self, rng: random.Random, size: int, depth: int | None, env: Env) -> Sample:
        """One prompt of ``size`` haystack units with its queried needle at ``depth``."""
        ...


TASKS: dict[str, Task] = {
    "niah_single_1": Niah("noise"),
    "niah_single_2": Niah("essay"),
    "niah_single_3": Niah("essay", value_kind="uuids"),
    "niah_multikey_1": Niah("essay", keys=4),
    "niah_multikey_2": Niah("needle"),
    "niah_multikey_3": Niah("needle", key_kind="uuids", value_kind="uuids"),
    "niah_multivalue": Niah("essay", values=4),
    "niah_multiquery": Niah("essay", queries=4),
    "vt": VariableTracking(),
    "cwe": CommonWords(),
    "fwe": FrequentWords(),
}
METRIC = "string_match_all"


def task(name: str) -> Task:
    """The task called ``name``.

    Raises:
        ValueError: An unknown name (the message lists the known ones).
    """
    if name not in TASKS:
        raise ValueError(f"unknown RULER task {name!r}; the tasks are {', '.join(TASKS)}")
    return TASKS[name]


def parse_tasks(text: str | list[str] | None) -> list[str]:
    """``niah_single_1,vt`` (or a list, or ``all``/None for all eleven) -> task names in
    :data:`TASKS` order, each once.

    Raises:
        ValueError: An unknown name or none at all.
    """
    if text is None or text == "all" or text == ["all"]:
        return list(TASKS)
    names = text.split(",") if isinstance(text, str) else [str(t) for t in text]
    names = [n.strip() for n in names if n.strip()]
    if not names:
        raise ValueError(f"no RULER task named; choose from {', '.join(TASKS)} (or all)")
    for name in names:
        task(name)
    return [n for n in TASKS if n in names]
