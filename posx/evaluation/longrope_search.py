"""LongRoPE's search (Ding et al. 2024): per-dimension RoPE rescale factors found by evolution.

A candidate is a vector ``lambda [d/2]`` dividing the trained inverse frequencies
(``theta_j / lambda_j``), non-decreasing over the dimensions (fast dims rescaled least) and
within ``[1, s]``. The search starts from the factors position interpolation, NTK-aware scaling
and YaRN would use (:func:`start_factors`), fills a population by mutating them, then for a
number of iterations keeps the best ``parents`` and adds mutations and crossovers of them, as
the reference's ``dim_mono`` algorithm does (microsoft/LongRoPE, ``evolution/``): a mutation
moves each dimension with probability ``rate`` to a point of a grid of ``step`` between its
neighbours (so the vector stays non-decreasing), a crossover takes each dimension from the
second parent with probability one half and is kept only when non-decreasing.

The fitness is any callable (lower is better; posx passes perplexity on a search split of the
held-in text), evaluated once per distinct candidate. The best candidate is the least fitness
of everything evaluated, the starts included, so the search never returns worse than its best
start. After the starts and after each iteration the whole state (population, every fitness,
the random generator) is written to a JSON file, atomically: an interrupted search resumes from
it and goes on as an uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posx.config.schema import LongRopeSearchConfig
from posx.encodings.rope_scaling import RopeScaling, base_inv_freq, scaled_inv_freq
from posx.errors import ConfigError, PosxError

STATE_VERSION = 1
Fitness = Callable[[Sequence[float]], float]
Say = Callable[[str], None]
_DEFAULTS = LongRopeSearchConfig()


@dataclass(frozen=True)
class SearchSettings:
    """The evolution's sizes (the reference's defaults are 64, 32, 16, 16, 40 and 0.01; these
    fit a CPU, ``longrope.*`` settings change them).

    Attributes:
        population: Candidates in the first population.
        parents: The best kept each iteration.
        mutations: Mutated children per iteration.
        crossovers: Crossed children per iteration.
        iterations: Iterations after the first population.
        step: Grid of a mutated factor.
        rate: Probability that a mutation moves one dimension.
        seed: The generator's seed.
    """

    # one source of the defaults: the schema's extend.longrope, which posx extend RUN composes
    population: int = _DEFAULTS.population
    parents: int = _DEFAULTS.parents
    mutations: int = _DEFAULTS.mutations
    crossovers: int = _DEFAULTS.crossovers
    iterations: int = _DEFAULTS.iterations
    step: float = _DEFAULTS.step
    rate: float = 0.3
    seed: int = _DEFAULTS.seed

    def check(self) -> None:
        """Raises ConfigError (one line) on a size that cannot run."""
        for name in ("population", "parents", "iterations"):
            if getattr(self, name) < 1:
                raise ConfigError(f"longrope.{name} must be >= 1, got {getattr(self, name)}")
        if self.mutations < 0 or self.crossovers < 0:
            raise ConfigError("longrope.mutations and longrope.crossovers must be >= 0")
        if self.parents > self.population:
            raise ConfigError(
                f"longrope.parents ({self.parents}) must be at most longrope.population "
                f"({self.population})"
            )
        if not (self.step > 0 and 0 < self.rate <= 1):
            raise ConfigError("longrope.step must be > 0 and longrope.rate in (0, 1]")


@dataclass
class SearchResult:
    """What a search found.

    Attributes:
        factors: The best ``lambda [d/2]``.
        fitness: Its fitness.
        starts: Each start's name and fitness.
        evaluated: Distinct candidates evaluated.
    """

    factors: list[float]
    fitness: float
    starts: dict[str, float]
    evaluated: int


def monotone(factors: Sequence[float], high: float) -> list[float]:
    """``factors`` made non-decreasing (running maximum) and clipped to ``[1, high]``."""
    out, top = [], 1.0
    for value in factors:
        top = max(top, min(float(value), high))
        out.append(round(top, 6))
    return out


def start_factors(base: float, dim: int, factor: float, original: int) -> dict[str, list[float]]:
    """The factors ``theta_j / theta'_j`` of PI, NTK-aware and YaRN at ``factor`` (the search's
    starts), each non-decreasing in ``[1, factor]``.

    Args:
        base: RoPE base.
        dim: Rotary width ``d``.
        factor: Length scale ``s`` (target / trained length).
        original: Trained length.
    """
    trained = base_inv_freq(base, dim, dtype=_float64())
    out = {}
    for kind in ("linear", "ntk", "yarn"):
        scaling = RopeScaling(type=kind, factor=factor, original_length=original)
        scaled = scaled_inv_freq(scaling, base, dim, dtype=_float64())
        out["pi" if kind == "linear" else kind] = monotone((trained / scaled).tolist(), factor)
    return out


def _float64() -> Any:
    import torch

    return torch.float64


class Search:
    """One evolutionary search.

    Args:
        fitness: Candidate factors -> fitness (lower is better).
        starts: Named starting factors (:func:`start_factors`), all of one length.
        high: The largest factor (the length scale ``s``).
        settings: The evolution's sizes.
        state: The JSON state file (None: not saved, not resumable).
        say: Called with a progress line after the starts and each iteration.
    """

    def __init__(
        self,
        fitness: Fitness,
        starts: Mapping[str, Sequence[float]],
        high: float,
        settings: SearchSettings,
        state: Path | None = None,
        say: Say | None = None,
    ) -> None:
        settings.check()
        self.fitness, self.high, self.settings = fitness, float(high), settings
        self.starts = {name: monotone(f, self.high) for name, f in starts.items()}
        self.state, self.say = state, say or (lambda _: None)
        self.rng = random.Random(settings.seed)
        self.seen: dict[tuple[float, ...], float] = {}
        self.population: list[tuple[float, ...]] = []
        self.iteration = 0

    # --- evaluation and state --------------------------------------------------------------

    def _score(self, factors: Sequence[float]) -> float:
        key = tuple(round(float(f), 6) for f in factors)
        if key not in self.seen:
            value = float(self.fitness(list(key)))
            self.seen[key] = value if math.isfinite(value) else math.inf
        return self.seen[key]

    def _identity(self) -> dict[str, Any]:
        return {"settings": dataclasses.asdict(self.settings), "starts": self.starts,
                "high": self.high}  # fmt: skip

    def _save(self) -> None:
        if self.state is None:
            return
        state = self.rng.getstate()
        data = {
            "version": STATE_VERSION,
            **self._identity(),
            "iteration": self.iteration,
            "population": [list(p) for p in self.population],
            "seen": [[list(k), v] for k, v in self.seen.items()],
            "rng": [state[0], list(state[1]), state[2]],
        }
        tmp = self.state.with_name(self.state.name + ".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.state)

    def _load(self) -> bool:
        """Reads the state file when there is one; True when it was read.

        Raises:
            PosxError: A damaged file, named.
            ConfigError: A state made with other settings, starts or scale.
        """
        if self.state is None or not self.state.is_file():
            return False
        try:
            data = json.loads(self.state.read_text())
            identity = {k: data[k] for k in ("settings", "starts", "high")}
            seen = {tuple(float(x) for x in k): float(v) for k, v in data["seen"]}
            population = [tuple(float(x) for x in p) for p in data["population"]]
            rng = (int(data["rng"][0]), tuple(int(x) for x in data["rng"][1]), data["rng"][2])
            iteration = int(data["iteration"])
        except (OSError, ValueError, KeyError, TypeError, IndexError) as err:
            raise PosxError(f"{self.state} is damaged ({type(err).__name__}: {err})") from err
        if json.loads(json.dumps(self._identity())) != identity:
            raise ConfigError(
                f"{self.state} holds a search with other settings, starts or scale; remove it "
                "to search again, or resume with the same settings"
            )
        try:
            self.rng.setstate(rng)
        except (TypeError, ValueError) as err:
            raise PosxError(f"{self.state} is damaged (its generator state: {err})") from err
        self.seen, self.population, self.iteration = seen, population, iteration
        return True

    # --- the evolution ---------------------------------------------------------------------

    def _grid(self, low: float, high: float) -> list[float]:
        steps = int(math.floor((high - low) / self.settings.step + 1e-9))
        return [round(low + k * self.settings.step, 6) for k in range(steps + 1)]

    def mutate(self, parent: Sequence[float], tries: int = 20) -> tuple[float, ...]:
        """A child of ``parent``: each dimension moved with probability ``rate`` to a grid point
        between its neighbours (non-decreasing kept); a new candidate when one is found in
        ``tries``."""
        child = list(parent)
        for _ in range(tries):
            child = list(parent)
            for j in range(len(child)):
                if self.rng.random() < self.settings.rate:
                    low = child[j - 1] if j > 0 else 1.0
                    high = child[j + 1] if j + 1 < len(child) else self.high
                    choices = self._grid(low, high)
                    if choices:
                        child[j] = self.rng.choice(choices)
            if tuple(child) not in self.seen:
                break
        return tuple(child)

    def crossover(self, one: Sequence[float], two: Sequence[float], tries: int = 20):
        """A child taking each dimension from ``two`` with probability one half, kept when it
        is non-decreasing and new; None after ``tries``."""
        for _ in range(tries):
            child = tuple(
                b if self.rng.random() < 0.5 else a for a, b in zip(one, two, strict=True)
            )
            ordered = all(x <= y for x, y in zip(child, child[1:], strict=False))
            if ordered and child not in self.seen:
                return child
        return None

    def run(self) -> SearchResult:
        """Searches (or resumes), and returns the best candidate of everything evaluated."""
        s = self.settings
        if not self._load():
            population = [tuple(f) for f in self.starts.values()]
            for f in population:
                self._score(f)
            seeds = list(self.starts.values())
            while len(population) < s.population:
                population.append(self.mutate(seeds[len(population) % len(seeds)]))
                self._score(population[-1])
            self.population = population
            self._save()
            self.say(self._line("starts"))
        while self.iteration < s.iterations:
            parents = sorted(self.population, key=self._score)[: s.parents]
            children = [self.mutate(self.rng.choice(parents)) for _ in range(s.mutations)]
            for _ in range(s.crossovers):
                one, two = self.rng.sample(parents, 2) if len(parents) > 1 else parents * 2
                child = self.crossover(one, two)
                children.append(child if child is not None else self.mutate(one))
            for child in children:
                self._score(child)
            self.population = parents + children
            self.iteration += 1
            self._save()
            self.say(self._line(f"iteration {self.iteration}/{s.iterations}"))
        best = min(self.seen, key=lambda k: self.seen[k])
        starts = {name: self.seen[tuple(f)] for name, f in self.starts.items()}
        return SearchResult(list(best), self.seen[best], starts, len(self.seen))

    def _line(self, what: str) -> str:
        best = min(self.seen.values())
        return f"longrope search {what}: best perplexity {best:.4f} ({len(self.seen)} evaluated)"
