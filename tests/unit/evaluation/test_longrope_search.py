"""LongRoPE's evolutionary search: every candidate non-decreasing within [1, s], never worse than
its best start, resumable to the same result, and refusing a state file it did not write."""

from __future__ import annotations

import json
import math

import pytest
import torch

from posx.encodings.rope import RoPE
from posx.encodings.rope_scaling import RopeScaling, base_inv_freq, scaled_inv_freq
from posx.errors import ConfigError, PosxError
from posx.evaluation.longrope_search import Search, SearchSettings, monotone, start_factors

DIM, SCALE = 16, 4.0
SMALL = SearchSettings(population=6, parents=3, mutations=3, crossovers=2, iterations=3, step=0.05)


def bowl(target: list[float]):
    """A fitness with its minimum at ``target`` (a non-decreasing vector), and every call."""
    calls: list[list[float]] = []

    def fitness(factors):
        calls.append(list(factors))
        return 1.0 + sum((a - b) ** 2 for a, b in zip(factors, target, strict=True))

    return fitness, calls


def starts() -> dict[str, list[float]]:
    return start_factors(10000.0, DIM, SCALE, 64)


def test_starts_are_pi_ntk_and_yarn_and_non_decreasing():
    found = starts()
    assert set(found) == {"pi", "ntk", "yarn"}
    assert found["pi"] == [SCALE] * (DIM // 2)
    for factors in found.values():
        assert len(factors) == DIM // 2
        assert all(1.0 <= a <= b <= SCALE for a, b in zip(factors, factors[1:], strict=False))
    # the NTK start is the base change: theta_j / theta'_j
    ntk = scaled_inv_freq(RopeScaling("ntk", SCALE, 64), 10000.0, DIM, dtype=torch.float64)
    want = (base_inv_freq(10000.0, DIM, torch.float64) / ntk).tolist()
    assert found["ntk"] == pytest.approx(want, abs=1e-5)


def test_every_candidate_is_non_decreasing_and_the_result_beats_every_start():
    target = monotone([1.0, 1.0, 1.2, 1.5, 2.0, 2.6, 3.1, 3.3], SCALE)
    fitness, calls = bowl(target)
    result = Search(fitness, starts(), SCALE, SMALL).run()
    made = list(calls)
    assert len(made) == result.evaluated  # one evaluation per distinct candidate
    for factors in made:
        assert all(1.0 <= a <= b <= SCALE for a, b in zip(factors, factors[1:], strict=False))
    assert result.fitness == min(fitness(f) for f in made)
    assert result.fitness <= min(result.starts.values())


def test_the_search_improves_on_its_starts_on_a_simple_bowl():
    target = monotone([1.0, 1.1, 1.3, 1.6, 2.0, 2.4, 2.9, 3.2], SCALE)
    fitness, _ = bowl(target)
    settings = SearchSettings(population=8, parents=4, mutations=6, crossovers=2, iterations=8)
    result = Search(fitness, starts(), SCALE, settings).run()
    assert result.fitness < min(result.starts.values())


def test_an_interrupted_search_resumes_to_the_same_result(tmp_path):
    target = monotone([1.0, 1.0, 1.2, 1.5, 2.0, 2.6, 3.1, 3.3], SCALE)
    whole = Search(bowl(target)[0], starts(), SCALE, SMALL).run()

    class Stop(Exception):
        pass

    state = tmp_path / "search.json"
    seen = []

    def stopping(factors):
        seen.append(factors)
        if len(seen) > 10:  # after the first population, inside the first iteration
            raise Stop
        return bowl(target)[0](factors)

    with pytest.raises(Stop):
        Search(stopping, starts(), SCALE, SMALL, state=state).run()
    assert json.loads(state.read_text())["iteration"] == 0
    fitness, calls = bowl(target)
    lines: list[str] = []
    resumed = Search(fitness, starts(), SCALE, SMALL, state=state, say=lines.append).run()
    assert (resumed.factors, resumed.fitness) == (whole.factors, whole.fitness)
    assert len(calls) < whole.evaluated  # the first population was not evaluated again
    assert lines[-1].startswith("longrope search iteration 3/3: best perplexity")


def test_a_state_of_other_settings_or_damaged_is_refused(tmp_path):
    state = tmp_path / "search.json"
    Search(bowl([1.0] * 8)[0], starts(), SCALE, SMALL, state=state).run()
    other = SearchSettings(population=7, parents=3, mutations=3, crossovers=2, iterations=3)
    with pytest.raises(ConfigError, match="other settings"):
        Search(bowl([1.0] * 8)[0], starts(), SCALE, other, state=state).run()
    state.write_text('{"version": 1, "settings"')
    with pytest.raises(PosxError, match="search.json is damaged"):
        Search(bowl([1.0] * 8)[0], starts(), SCALE, SMALL, state=state).run()


@pytest.mark.parametrize(
    "bad", [{"parents": 9}, {"population": 0}, {"step": 0.0}, {"rate": 1.5}, {"mutations": -1}]
)
def test_bad_settings_are_one_line(bad):
    with pytest.raises(ConfigError, match="longrope"):
        SearchSettings(**bad).check()


def test_a_rope_with_longrope_factors_divides_each_frequency():
    factors = [1.0, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 4.0]
    scaling = {"type": "longrope", "factor": 4.0, "factors": factors}
    rope = RoPE(DIM, scaling=scaling, train_length=64)
    want = base_inv_freq(10000.0, DIM) / torch.tensor(factors)
    torch.testing.assert_close(rope._freq, want)
    assert rope.attn_scale == pytest.approx(math.sqrt(1 + math.log(4) / math.log(64)))
    with pytest.raises(ValueError, match="needs 8 factors"):
        RoPE(DIM, scaling={**scaling, "factors": factors[:3]}, train_length=64)
