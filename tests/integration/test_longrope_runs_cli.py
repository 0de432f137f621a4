"""``posx extend RUN extension=longrope`` on posx's own RoPE runs: the factors are searched on the
parent's training data before the launch, land in the extension's config (non-decreasing, never
worse than the starts), and its RoPE uses them; an ALiBi parent is refused in one line with
nothing written."""

from __future__ import annotations

import json

import torch
from omegaconf import OmegaConf

from tests.conftest import TINY
from tests.integration.test_cli_errors import assert_one_line_error

SEARCH = ["extension=longrope", "extend.steps=2", "extend.warmup_steps=1",
          "extend.longrope.population=4", "extend.longrope.parents=2",
          "extend.longrope.mutations=2", "extend.longrope.crossovers=1",
          "extend.longrope.iterations=2", "extend.longrope.step=0.1",
          "extend.longrope.windows=1", "eval.lengths=[64]"]  # fmt: skip


def test_the_searched_factors_are_the_extensions_rope(cli, copy_run, tmp_path):
    from posx.encodings.rope import RoPE
    from posx.encodings.rope_scaling import base_inv_freq
    from posx.saved import SavedRun

    parent = copy_run()
    root = tmp_path / "out"
    done = cli("extend", str(parent), *SEARCH, f"root={root}")
    assert done.returncode == 0, done.stderr
    assert "longrope search iteration 2/2: best perplexity" in done.stderr
    (result,) = (root / ".longrope_search").glob("*.result.json")
    found = json.loads(result.read_text())
    assert found["perplexity"] <= min(found["starts"].values())
    factors = found["factors"]
    assert all(1.0 <= a <= b <= 4.0 for a, b in zip(factors, factors[1:], strict=False))
    (ext,) = [p.parent for p in root.rglob("run.json") if "longrope" in p.parent.name]
    cfg = OmegaConf.load(ext / ".hydra" / "config.yaml")
    assert list(cfg.encoding.scaling.factors) == factors and cfg.encoding.scaling.type == "longrope"
    assert json.loads((ext / "run.json").read_text())["encoding"] == "rope+longrope×4+ft@64"
    # the extension's RoPE (and so its evaluation) has these factors
    scaling = OmegaConf.to_container(SavedRun(ext).config, resolve=True)["encoding"]["scaling"]
    rope = RoPE(8, scaling=scaling, train_length=16)
    torch.testing.assert_close(rope._freq, base_inv_freq(10000.0, 8) / torch.tensor(factors))


def test_each_candidate_is_scored_without_composing_the_config_again(
    cli, copy_run, tmp_path, monkeypatch
):
    """Issue 53: each candidate's config was composed anew by Hydra (25 composes, more time
    than scoring them on a tiny model); the launch's config with the factors set is the same."""
    from posx.config import compose as compose_module

    composed, compose = [], compose_module.hydra_compose
    monkeypatch.setattr(
        compose_module, "hydra_compose", lambda *a, **k: composed.append(k) or compose(*a, **k)
    )
    done = cli(
        "extend",
        str(copy_run()),
        *SEARCH,
        "eval.lengths=[16]",
        f"root={tmp_path / 'out'}",
    )
    assert done.returncode == 0, done.stderr
    assert "longrope search iteration 2/2" in done.stderr
    # the parent's config, the probe and the launch, the launch with the factors found, and
    # Hydra's launch (sweep directory): 5, never one per candidate
    assert len(composed) <= 5, len(composed)


def test_an_alibi_parent_is_refused_and_nothing_is_written(cli, tmp_path):
    done = cli("train", *TINY, "encoding=alibi", "train.steps=2", f"root={tmp_path}")
    assert done.returncode == 0, done.stderr
    (parent,) = [p.parent for p in tmp_path.rglob("run.json")]
    before = sorted(p.name for p in tmp_path.rglob("*"))
    result = cli("extend", str(parent), *SEARCH)
    assert_one_line_error(result, 2, "has no setting 'scaling'")
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_a_launch_that_cannot_train_is_refused_before_the_search(cli, copy_run, tmp_path):
    root = tmp_path / "out"
    result = cli("extend", str(copy_run()), *SEARCH, "extend.steps=0", f"root={root}")
    assert_one_line_error(result, 2, "train.steps must be positive, got 0")
    assert not root.exists()  # no search state, no run
