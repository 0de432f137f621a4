"""Position strategies that read a task's structure: position coupling (Cho et al. 2024) and
Abacus (McLeish et al. 2024), golden on the papers' worked example; every encoding composes
with coupling; the trainer and the evaluator hand them the structure."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from posx.config.build import build_model, build_positions, build_task
from posx.config.compose import CONFIG_DIR, compose
from posx.encodings.abacus import Abacus
from posx.encodings.learned import Learned
from posx.errors import ConfigError
from posx.positions import AbacusPositions, CoupledPositions, structured_step_positions
from posx.runtime.distributed import World
from posx.tasks.base import TokenStructure
from posx.tasks.synthetic.arithmetic import ArithmeticTask

ENCODINGS = sorted(p.stem for p in (CONFIG_DIR / "encoding").glob("*.yaml"))
TASK = ArithmeticTask()
# 653 + 49 = 702 as the papers write it: least-significant digit first, 3 5 6 + 9 4 = 2 0 7 0.
ROW = torch.tensor(
    [[TASK.bos, 3, 5, 6, TASK.operator, 9, 4, TASK.sep, 2, 0, 7, 0, TASK.pad, TASK.pad]]
)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_coupling_golden():
    """Same significance, same ID: 3|9 share 1, 5|4 share 2, 6 has 3; the token predicting the
    answer digit of significance j (``=`` for 2, then 2 for 0, ...) has that digit's ID."""
    pos = CoupledPositions().structured(TASK.structure(ROW), gen(), training=False)
    #                       BOS 3  5  6  +  9  4  =  2  0  7  0  PAD PAD
    assert pos.tolist() == [[0, 1, 2, 3, 0, 1, 2, 1, 2, 3, 4, 5, 0, 0]]


def test_abacus_golden():
    """Each digit's index within its own number, units digit = 1, non-digits 0 (McLeish et al.
    Figure 2), in operands and answer alike."""
    pos = AbacusPositions().structured(TASK.structure(ROW), gen(), training=False)
    #                       BOS 3  5  6  +  9  4  =  2  0  7  0  PAD PAD
    assert pos.tolist() == [[0, 1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 4, 0, 0]]


@pytest.mark.parametrize("strategy", [CoupledPositions, AbacusPositions])
def test_eval_offset_shifts_every_structured_token_by_the_same_amount(strategy):
    """``eval_offset`` moves the evaluation IDs off the rarely trained smallest ones; the
    papers' 0 is the default; an offset training never reaches is refused."""
    plain = strategy(max_offset=13).structured(TASK.structure(ROW), gen(), training=False)
    moved = strategy(max_offset=13, eval_offset=3).structured(TASK.structure(ROW), gen(), False)
    assert moved.tolist() == torch.where(plain > 0, plain + 3, 0).tolist()
    with pytest.raises(ConfigError, match=r"eval_offset must be in \[0, max_offset=2\], got 3"):
        strategy(max_offset=2, eval_offset=3)


@pytest.mark.parametrize("strategy", [CoupledPositions(max_offset=20), AbacusPositions(20)])
def test_training_offsets_are_random_per_sequence_and_shift_structured_tokens_only(strategy):
    rows = ROW.repeat(64, 1)
    plain = strategy.structured(TASK.structure(rows), gen(), training=False)
    shifted = strategy.structured(TASK.structure(rows), gen(3), training=True)
    moved = plain > 0
    offsets = (shifted - plain)[moved].view(64, -1)
    assert (offsets == offsets[:, :1]).all()  # one offset per sequence
    assert len(offsets[:, 0].unique()) > 5 and offsets.min() >= 0 and offsets.max() <= 20
    assert (shifted[~moved] == 0).all()


def test_step_positions_are_seeded_and_sharded_like_the_batch():
    structure = TASK.structure(TASK.train_batch(8, 4, gen()).inputs)
    one = structured_step_positions(CoupledPositions(), structure, seed=1, step=5)
    assert torch.equal(one, structured_step_positions(CoupledPositions(), structure, 1, 5))
    assert not torch.equal(one, structured_step_positions(CoupledPositions(), structure, 1, 6))
    half = TokenStructure(structure.number[4:], structure.significance[4:], structure.role[4:])
    rank1 = structured_step_positions(CoupledPositions(), half, 1, 5, World(rank=1, size=2))
    assert torch.equal(rank1, one[4:])  # the rows one process would have given rank 1


def test_a_task_without_numbers_is_one_number():
    """Copy reports no structure: coupling and Abacus then give 1..s (plus the offset)."""
    inputs = torch.zeros(2, 6, dtype=torch.long)
    structure = build_task(compose(["task=copy"])).structure(inputs)
    for strategy in (CoupledPositions(), AbacusPositions()):
        pos = strategy.structured(structure, gen(), training=False)
        assert pos.tolist() == [[1, 2, 3, 4, 5, 6]] * 2


@torch.no_grad()
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_every_encoding_composes_with_coupling(encoding):
    """Coupled IDs repeat and go down (an answer digit shares its ID with operand digits far
    behind it): every encoding must run on them, causally, with finite outputs."""
    extra = ["encoding.max_len=64"] if encoding == "learned" else []
    cfg = compose([f"encoding={encoding}", "model.d_model=32", "model.n_heads=4",
                   "model.n_layers=1", "train.length=5", "task=arithmetic", *extra])  # fmt: skip
    task = build_task(cfg)
    torch.manual_seed(0)
    model = build_model(cfg, task.vocab_size).eval()
    batch = task.train_batch(2, 5, gen())
    pos = CoupledPositions().structured(task.structure(batch.inputs), gen(1), training=True)
    assert (pos.diff(dim=1) < 0).any()  # not monotone: the point of the test
    out = model(batch.inputs, pos)
    assert out.shape == (*batch.inputs.shape, task.vocab_size) and torch.isfinite(out).all()
    j = 9
    changed = batch.inputs.clone()
    changed[:, j] = (changed[:, j] + 1) % 10
    after = model(changed, pos)
    torch.testing.assert_close(after[:, :j], out[:, :j], atol=1e-5, rtol=0)


def test_strategies_check_the_table_they_train():
    cfg = compose(["encoding=learned", "train.length=5", "task=arithmetic"])
    learned = build_model(cfg, 20).encoding
    with pytest.raises(ConfigError, match=r"positions=coupling trains positions up to 39"):
        CoupledPositions(max_offset=32).check(learned, 5, 6)
    with pytest.raises(ConfigError, match=r"set encoding.max_index=39 "):
        AbacusPositions(max_offset=32).check(Abacus(8, max_index=16), 5, 6)
    AbacusPositions(max_offset=32).check(Abacus(8, max_index=39), 5, 6)
    made = build_positions(compose(["positions=coupling", "positions.max_offset=7"]))
    assert isinstance(made, CoupledPositions) and made.max_offset == 7
    with pytest.raises(ConfigError, match="max_offset must be >= 0"):
        build_positions(compose(["positions=abacus", "positions.max_offset=-1"]))


@pytest.mark.parametrize(
    ("positions", "rows"), [("default", 18), ("coupling", 12 + 5 + 3), ("randomized", 18)]
)
def test_a_learned_table_defaults_to_the_positions_training_reaches(positions: str, rows: int):
    """5-digit addition is 18 tokens (BOS, 5 + 1 + 5 digits, SEP, 6 answer digits, less the
    shifted target); coupled IDs reach ``max_offset + 5 + 2``. An explicit max_len wins."""
    base = ["encoding=learned", "train.length=5", "task=arithmetic", f"positions={positions}"]
    cfg = compose([*base, "positions.max_offset=12"] if positions == "coupling" else base)
    assert build_model(cfg, 20).encoding.max_len == rows
    assert build_model(compose([*base, "encoding.max_len=64"]), 20).encoding.max_len == 64
    with pytest.raises(ValueError, match="needs max_len"):
        Learned(d_model=8)


def test_abacus_table_refuses_an_index_past_it():
    enc = Abacus(8, max_index=4)
    x = torch.zeros(1, 3, 8)
    assert enc.embed(x, torch.tensor([0, 3, 1])).shape == (1, 3, 8)
    with pytest.raises(ConfigError, match="abacus index 4 is past the table's 4 rows"):
        enc.embed(x, torch.tensor([0, 4, 1]))
    with pytest.raises(ValueError, match="integers"):  # as learned's table: not a config error
        enc.embed(x, torch.tensor([0.0, 1.0, 2.0]))


def test_trainer_and_evaluator_feed_structured_positions(tmp_path: Path, seen_positions):
    from posx.evaluation.sweep import evaluate_model
    from posx.training.loop import train

    seen = seen_positions
    overrides = ["model.d_model=16", "model.n_heads=2", "model.n_layers=1", "task=arithmetic",
                 "encoding=abacus", "positions=abacus", "train.length=3", "train.steps=2",
                 "train.batch_size=4", "train.progress=false",
                 "train.eval_at_end=false"]  # fmt: skip
    cfg = compose(overrides)
    names = {"encoding": "abacus", "task": "arithmetic", "model": "tiny", "positions": "abacus"}
    done = train(cfg, tmp_path, names)
    task = done.task
    assert len(seen) == 2 and seen[0].shape == (4, task.tokens_for(3))
    assert seen[0].max() > 4  # training offsets reach past the 3-digit indices
    tokens = done.summary["tokens_per_s"] * done.summary["seconds"]  # tokens, not digits
    assert tokens == pytest.approx(2 * 4 * task.tokens_for(3))
    seen.clear()
    rows, _ = evaluate_model(done.model, task, [3, 6], cfg, torch.device("cpu"))
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert [r["length_unit"] for r in rows] == ["digits", "digits"]
    assert all("operand_grid" in r for r in rows)
    assert seen and all(p is not None and p.max() <= 8 for p in seen)  # no offset at eval


@pytest.mark.parametrize("op", ["add", "multiply"])
@pytest.mark.parametrize("strategy", [CoupledPositions(max_offset=6, eval_offset=2),
                                      AbacusPositions(max_offset=6, eval_offset=2)])  # fmt: skip
def test_the_ids_an_eval_length_needs_are_the_ids_it_gets(strategy, op: str):
    """Issue 45, item 1: a strategy reports the largest ID an evaluation needs from the task's
    longest number (the answer), not from the token count; the IDs the eval set really gets
    reach exactly that, at 1x, 2x and 3x."""
    task = ArithmeticTask(op=op, multiplier_digits=2)
    for digits in (4, 8, 12):
        data = task.eval_set(digits, 64, seed=0)
        ids = strategy.structured(task.structure(data.inputs), gen(), training=False)
        needed = strategy.positions_needed(data.inputs.shape[1], task.longest_number(digits),
                                           training=False)  # fmt: skip
        assert int(ids.max()) == needed - 1, (digits, int(ids.max()), needed)
        assert needed < data.inputs.shape[1]  # fewer IDs than tokens: what the old check read


def test_an_abacus_table_is_checked_against_the_indices_at_evaluation():
    """An index past the Abacus table is `unsupported` before any forward pass (it was a
    `failed` row from the embedding's error): 10-digit eval at offset 0 needs rows 0..11."""
    table = Abacus(8, max_index=11)
    reason = AbacusPositions(max_offset=0).eval_reason(
        table, 40, ArithmeticTask().longest_number(10)
    )
    assert reason == (
        "positions=abacus gives 11-digit numbers IDs up to 11: Abacus has 11 rows; asked for 12"
    )
    assert AbacusPositions(max_offset=0).eval_reason(Abacus(8, max_index=12), 40, 11) is None
