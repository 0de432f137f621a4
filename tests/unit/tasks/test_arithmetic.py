"""ArithmeticTask: the papers' formats (reversed digits, mixed operand lengths, index hints),
lengths in digits, the per-token structure, and the operand-length grid of an eval set."""

from __future__ import annotations

import json

import pytest
import torch

from posx.errors import ConfigError
from posx.tasks.base import TokenStructure
from posx.tasks.synthetic.arithmetic import ArithmeticTask


def read(task: ArithmeticTask, row: list[int]) -> tuple[list[int], list[int], list[int], int]:
    """``(a digits, b digits, answer tokens, SEP position)`` of one input row, hints dropped."""
    sep = row.index(task.sep)
    op = row.index(task.operator)
    digits = lambda part: [t for t in part if t < 10]  # noqa: E731
    return digits(row[1:op]), digits(row[op + 1 : sep]), row[sep + 1 :], sep


def value(digits: list[int]) -> int:
    return int("".join(map(str, digits[::-1])))  # least-significant digit first


@pytest.mark.parametrize(("op", "hints"), [("add", False), ("add", True), ("multiply", False)])
def test_answers_are_right_and_only_the_answer_is_scored(op, hints):
    task = ArithmeticTask(op=op, index_hints=hints, multiplier_digits=2)
    batch = task.train_batch(64, 6, torch.Generator().manual_seed(0))
    assert batch.inputs.shape == (64, task.tokens_for(6))
    for i in range(64):
        row = [*batch.inputs[i].tolist(), int(batch.targets[i, -1])]
        a, b, _, sep = read(task, row)
        assert 1 <= len(a) <= 6 and 1 <= len(b) <= (6 if op == "add" else 2)
        want = value(a) + value(b) if op == "add" else value(a) * value(b)
        width = max(len(a), len(b)) + 1 if op == "add" else len(a) + 2
        scored = batch.targets[i][batch.mask[i]].tolist()
        answer = [t for t in scored if t < 10]
        assert answer == [int(c) for c in str(want).zfill(width)[::-1]]
        assert len(scored) == width * (2 if hints else 1)
        assert batch.mask[i].nonzero().min() == sep - 1 + 1  # SEP predicts the first answer token


def test_operand_lengths_are_mixed_per_instance():
    task = ArithmeticTask()
    st = task.structure(task.train_batch(512, 5, torch.Generator().manual_seed(1)).inputs)
    digit = st.role == TokenStructure.ROLE_OPERAND
    la, lb = (digit & (st.number == 0)).sum(1), (digit & (st.number == 1)).sum(1)
    assert set(la.tolist()) == set(range(1, 6)) == set(lb.tolist())
    assert (la != lb).float().mean() > 0.5


def test_golden_layout_and_structure_of_653_plus_49():
    """653 + 49 = 702, written least-significant digit first: 3 5 6 + 9 4 = 2 0 7 0."""
    task = ArithmeticTask()
    bos, plus, sep, pad = task.bos, task.operator, task.sep, task.pad
    row = torch.tensor([[bos, 3, 5, 6, plus, 9, 4, sep, 2, 0, 7, 0, pad]])
    st = task.structure(row)
    assert st.number.tolist() == [[-1, 0, 0, 0, -1, 1, 1, 2, 2, 2, 2, 2, -1]]
    assert st.significance.tolist() == [[-1, 0, 1, 2, -1, 0, 1, -1, 0, 1, 2, 3, -1]]
    o, d, a, s, x = (getattr(TokenStructure, f"ROLE_{r}") for r in
                     ("OPERATOR", "OPERAND", "ANSWER", "ANSWER_START", "OTHER"))  # fmt: skip
    assert st.role.tolist() == [[x, d, d, d, o, d, d, s, a, a, a, a, x]]


def test_index_hints_golden():
    """Zhou et al.: every digit is preceded by the hint of its significance, the same hint in
    both operands and the answer; hints start at a random offset and are scored in the answer."""
    task = ArithmeticTask(index_hints=True, num_hints=12)
    batch = task.train_batch(256, 3, torch.Generator().manual_seed(2))
    starts = set()
    for i in range(256):
        row = [*batch.inputs[i].tolist(), int(batch.targets[i, -1])]
        body = [t for t in row if t not in (task.bos, task.pad)]
        numbers, current = [], []
        for t in [*body, task.sep]:
            if t in (task.operator, task.sep):
                numbers.append(current)
                current = []
            else:
                current.append(t)
        assert len(numbers) == 3  # a, b, answer
        first = numbers[0][0]
        for number in numbers:
            hints, digits = number[0::2], number[1::2]
            assert hints == [first + j for j in range(len(hints))], row
            assert all(d < 10 for d in digits)
        starts.add(first - task.first_hint)
        st = task.structure(batch.inputs[i : i + 1])
        hint = st.role[0] == TokenStructure.ROLE_HINT
        # each hint names the digit after it (the last input token's digit is only a target)
        nxt = st.significance[0, 1:][hint[:-1]]
        assert (st.significance[0, :-1][hint[:-1]] == nxt).all()
    assert len(starts) > 3  # hints start at random offsets


def test_lengths_are_digits_and_eval_sets_cover_the_grid():
    task = ArithmeticTask()
    assert task.length_unit == "digits"
    assert task.tokens_for(5) == 3 + 5 + 5 + 6 - 1
    data = task.eval_set(4, 400, seed=0)
    assert data.inputs.shape == (400, task.tokens_for(4))
    grid = json.loads(
        task.sequence_metrics(data, torch.ones(400, dtype=torch.bool))["operand_grid"]
    )
    assert {max(map(int, k.split(","))) for k in grid} == {4}  # one operand has exactly 4
    assert set(grid) == {f"4,{b}" for b in range(1, 5)} | {f"{a},4" for a in range(1, 5)}
    assert sum(n for _, n in grid.values()) == 400
    again = task.eval_set(4, 400, seed=0)
    assert torch.equal(again.inputs, data.inputs)
    correct = torch.zeros(400, dtype=torch.bool)
    correct[:10] = True
    grid = json.loads(task.sequence_metrics(data, correct)["operand_grid"])
    assert sum(e for e, _ in grid.values()) == 10


@pytest.mark.parametrize(
    ("kwargs", "length", "message"),
    [
        ({"op": "divide"}, 3, "task.op must be one of add, multiply"),
        ({"num_hints": 1}, 3, "task.num_hints must be >= 2"),
        ({"index_hints": True, "num_hints": 8}, 10, "need 11 index hints; task.num_hints is 8"),
        ({"min_size": 3}, 2, "needs at least 3 digits, got 2"),
    ],
)
def test_bad_settings_say_what_is_allowed(kwargs, length, message):
    with pytest.raises(ConfigError, match=message):
        ArithmeticTask(**kwargs).tokens_for(length)


@pytest.mark.parametrize("hints", [False, True])
def test_an_n_digit_operand_has_n_significant_digits(hints: bool):
    """Issue 45, item 3: about 10% of "N-digit" operands started with a zero (N tokens, N - 1
    significant digits). Now the top digit of every operand of 2+ digits is 1-9, in training
    and in the eval sets; a 1-digit operand may be 0."""
    task = ArithmeticTask(index_hints=hints, num_hints=20)
    for batch in (task.train_batch(2000, 6, torch.Generator().manual_seed(0)),
                  task.eval_set(12, 2000, seed=0)):  # fmt: skip
        tops, ones = [], []
        for row in batch.inputs.tolist():
            for digits in read(task, row)[:2]:
                (tops if len(digits) > 1 else ones).append(digits[-1])
        assert 0 not in tops and set(tops) == set(range(1, 10)), sorted(set(tops))
    assert 0 in ones  # the number 0 is a 1-digit operand


def test_eval_sets_past_training_hold_operands_of_unequal_length():
    """Issue 45, item 6: at 2x its 8 training digits the eval set holds 16-digit operands
    against every shorter one, on either side (1 .. 15 digits, past training too), not only
    pairs of equal length; the operand grid keeps them apart for the heatmap."""
    task = ArithmeticTask()
    data = task.eval_set(16, 2000, seed=0)
    grid = json.loads(
        task.sequence_metrics(data, torch.ones(2000, dtype=torch.bool))["operand_grid"]
    )
    counts = {tuple(map(int, k.split(","))): n for k, (_, n) in grid.items()}
    assert {(16, b) for b in range(9, 16)} | {(a, 16) for a in range(9, 16)} <= set(counts)
    unequal = sum(n for (a, b), n in counts.items() if a != b)
    assert unequal > 0.9 * 2000  # equal lengths are 1 pair in 16 per side
