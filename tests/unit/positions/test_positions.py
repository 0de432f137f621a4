"""Training-time position strategies: randomized (Ruoss et al. 2023) and PoSE (Zhu et al. 2023),
their config group, checks, and the label they give a run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from posx.config.build import build_model, build_positions, build_task
from posx.config.compose import compose
from posx.errors import ConfigError
from posx.positions import (
    PoSEPositions,
    PositionStrategy,
    RandomizedPositions,
    pose_positions,
    randomized_positions,
    step_positions,
)
from posx.runtime.distributed import World
from posx.training.loop import run_meta

TINY = ["model.d_model=32", "model.n_heads=4", "model.n_layers=1", "train.length=16"]
CPU = torch.device("cpu")


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_randomized_positions_sorted_unique_in_range_and_seeded():
    pos = randomized_positions(64, 16, 100, gen())
    assert pos.shape == (64, 16)
    assert (pos.diff(dim=-1) > 0).all()  # sorted and distinct
    assert pos.min() >= 0 and pos.max() < 100
    assert torch.equal(pos, randomized_positions(64, 16, 100, gen()))
    assert not torch.equal(pos, randomized_positions(64, 16, 100, gen(1)))
    assert not torch.equal(pos[0], pos[1])  # each sequence draws its own
    # Over many draws every position of [0, max_pos) occurs, the top one included.
    assert set(pos.flatten().tolist()) == set(range(100))
    assert torch.equal(randomized_positions(2, 8, 8, gen()), torch.arange(8).expand(2, 8))


@pytest.mark.parametrize("chunks", [1, 2, 4])
def test_pose_chunks_are_contiguous_ordered_and_in_range(chunks):
    length, target = 16, 64
    pos = pose_positions(200, length, target, chunks, gen())
    assert pos.shape == (200, length)
    assert (pos[:, 0] == 0).all()  # the first chunk is not shifted
    assert pos.max() < target and (pos.diff(dim=-1) >= 1).all()  # order kept
    jumps = (pos.diff(dim=-1) > 1).sum(-1)
    assert (jumps <= chunks - 1).all()  # contiguous inside each chunk
    if chunks > 1:
        last, skip = pos[:, -1].float(), target - length
        assert last.max() == target - 1  # the skips reach the end of the target length
        assert (last > length - 1).float().mean() > 0.9  # nearly every row skips
        # u_c is uniform in [u_{c-1}, skip]: the last chunk's mean offset is skip (1 - 2^-(c-1))
        assert abs(last.mean() - (length - 1 + skip * (1 - 0.5 ** (chunks - 1)))) < 3
        assert jumps.max() == chunks - 1
    assert torch.equal(pos, pose_positions(200, length, target, chunks, gen()))


def test_pose_without_room_to_skip_is_arange():
    assert torch.equal(pose_positions(3, 8, 8, 2, gen()), torch.arange(8).expand(3, 8))


def test_step_positions_depend_on_seed_and_step_and_shard_by_rank():
    strategy = RandomizedPositions(max_pos=50)
    a = step_positions(strategy, 0, 3, 8, 10)
    assert torch.equal(a, step_positions(strategy, 0, 3, 8, 10))
    assert not torch.equal(a, step_positions(strategy, 0, 4, 8, 10))
    assert not torch.equal(a, step_positions(strategy, 1, 3, 8, 10))
    halves = [step_positions(strategy, 0, 3, 8, 10, World(rank=r, size=2)) for r in (0, 1)]
    assert torch.equal(torch.cat(halves), a)
    assert torch.equal(step_positions(PositionStrategy(), 0, 0, 8, 5), torch.arange(5))


def test_eval_positions():
    assert PositionStrategy().evaluator(0) is None
    assert RandomizedPositions(max_pos=32).evaluator(0) is None  # arange unless at_eval
    sampled = RandomizedPositions(max_pos=32, at_eval=True)
    a, b = sampled.evaluator(5)(3, 8), sampled.evaluator(5)(3, 8)
    assert torch.equal(a, b) and a.shape == (3, 8) and a.max() < 32
    assert sampled.unsupported_reason(32) is None
    assert "[0, 32)" in sampled.unsupported_reason(33)
    assert PoSEPositions(target_length=64).evaluator(0) is None


def test_config_group_builds_each_strategy():
    assert type(build_positions(compose(TINY))) is PositionStrategy
    made = build_positions(compose([*TINY, "positions=randomized", "positions.max_pos=99"]))
    assert isinstance(made, RandomizedPositions) and made.max_pos == 99
    made = build_positions(compose([*TINY, "positions=pose", "positions.chunks=3"]))
    assert isinstance(made, PoSEPositions) and made.chunks == 3
    with pytest.raises(ConfigError, match="max_pos"):
        build_positions(compose([*TINY, "positions=randomized", "positions.max_pos=0"]))
    with pytest.raises(ConfigError, match="has no parameter 'max_len'"):
        build_positions(compose([*TINY, "positions=randomized", "+positions.max_len=3"]))


def test_learned_table_must_cover_the_trained_positions():
    cfg = compose([*TINY, "encoding=learned", "positions=randomized"])
    model = build_model(cfg, build_task(cfg).vocab_size)
    with pytest.raises(ConfigError, match=r"encoding.max_len=1024"):
        build_positions(cfg).check(model.encoding, 16, 16)
    cfg = compose([*TINY, "encoding=learned", "positions=pose", "encoding.max_len=512"])
    build_positions(cfg).check(build_model(cfg, 10).encoding, 16, 16)  # 512 >= target_length
    with pytest.raises(ConfigError, match="train.length"):
        PoSEPositions(target_length=8).check(build_model(cfg, 10).encoding, 16, 16)


def test_run_label_names_the_strategy(tmp_path: Path):
    names = {"encoding": "rope", "task": "text", "model": "tiny"}
    cfg = compose([*TINY, "positions=randomized"])
    meta = run_meta(cfg, tmp_path, {**names, "positions": "randomized"}, {}, CPU)
    assert meta["encoding"] == "rope+randomized" and meta["positions"] == "randomized"
    assert meta["positions_config"]["max_pos"] == 1024
    plain = run_meta(compose(TINY), tmp_path, {**names, "positions": "default"}, {}, CPU)
    assert plain["encoding"] == "rope" and plain["positions"] == "default"
    assert run_meta(compose(TINY), tmp_path, names, {}, CPU)["encoding"] == "rope"


def test_training_with_randomized_positions_feeds_them_to_the_model(tmp_path: Path, seen_positions):
    """The training loop hands the sampled ``[b, s]`` positions to the model."""
    from posx.training.loop import train

    seen = seen_positions
    overrides = [
        *TINY,
        "task=copy",
        "positions=randomized",
        "positions.max_pos=40",
        "train.steps=2",
        "train.batch_size=4",
        "train.progress=false",
        "train.eval_at_end=false",
    ]
    train(
        compose(overrides),
        tmp_path,
        {"encoding": "rope", "task": "copy", "model": "tiny", "positions": "randomized"},
    )
    assert len(seen) == 2 and seen[0].shape == (4, 16)
    assert seen[0].max() < 40 and not torch.equal(seen[0], seen[1])
    assert (seen[0].diff(dim=-1) > 0).all()
