"""PositionMemo: values are reused only while positions, key, grad mode and scope allow it."""

from __future__ import annotations

import torch

from posx.kernels.memo import PositionMemo, forward_scope, parameter_versions


def counting(memo: PositionMemo):
    calls = []

    def get(key, pos, make=lambda pos: pos.float() * 2):
        def compute():
            calls.append(key)
            return make(pos)

        return memo.get(key, (pos,), compute)

    return get, calls


def test_equal_positions_reuse_the_value_and_other_positions_recompute():
    get, calls = counting(PositionMemo())
    first = get("k", torch.arange(5))
    assert get("k", torch.arange(5)) is first  # a new tensor with equal values: reused
    assert len(calls) == 1
    shifted = get("k", torch.arange(1, 6))
    assert len(calls) == 2 and torch.equal(shifted, torch.arange(1, 6).float() * 2)
    get("other key", torch.arange(1, 6))
    assert len(calls) == 3


def test_changing_the_callers_positions_in_place_is_noticed():
    get, calls = counting(PositionMemo())
    pos = torch.arange(4)
    get("k", pos)
    pos[0] = 7  # the memo kept its own copy, so this is a different position set now
    assert torch.equal(get("k", pos), pos.float() * 2)
    assert len(calls) == 2


def test_grad_mode_and_inference_mode_are_part_of_the_key():
    get, calls = counting(PositionMemo())
    pos = torch.arange(3)
    get("k", pos)
    with torch.no_grad():
        get("k", pos)
    with torch.inference_mode():
        made = get("k", pos)
    assert len(calls) == 3
    assert made.is_inference()
    assert not get("k", pos).is_inference()  # never handed to autograd outside inference mode


def test_tracked_values_live_only_inside_their_forward_scope():
    weight = torch.ones(3, requires_grad=True)
    get, calls = counting(PositionMemo())
    make = lambda pos: pos.float() * weight  # noqa: E731
    pos = torch.arange(3)
    get("k", pos, make)
    get("k", pos, make)
    assert len(calls) == 2  # outside any scope a tracked value is never kept
    with forward_scope():
        a = get("k", pos, make)
        assert get("k", pos, make) is a
    with forward_scope():
        assert get("k", pos, make) is not a  # the next forward builds its own graph
    assert len(calls) == 4


def test_memory_stays_within_the_budget():
    memo = PositionMemo(max_elements=10)
    get, calls = counting(memo)
    get("big", torch.arange(11))
    get("big", torch.arange(11))
    assert len(calls) == 2 and memo._held == 0  # larger than the budget: never kept
    for n in range(3):
        get(("small", n), torch.arange(4))
        assert memo._held <= 10
    assert len(memo._entries) == 2  # the oldest entry made room for the newest


def test_parameter_versions_change_with_an_optimizer_step():
    layer = torch.nn.Linear(2, 2)
    before = parameter_versions(layer)
    layer(torch.ones(1, 2)).sum().backward()
    torch.optim.SGD(layer.parameters(), lr=0.1).step()
    assert parameter_versions(layer) != before


def test_a_cycle_larger_than_the_budget_keeps_the_part_that_fits():
    """Attention asks for the same blocks in every layer: with room for two of three, evicting
    the least recently used one would miss every time; the memo keeps two and hits them."""
    get, calls = counting(PositionMemo(max_elements=10))
    for _ in range(4):
        for key in "abc":
            get(key, torch.arange(4))
    # the first cycle computes all three, then only the one that does not fit
    assert calls == ["a", "b", "c", "a", "a", "a"]


def test_entries_of_a_finished_cycle_make_room_for_a_new_one():
    get, calls = counting(PositionMemo(max_elements=10))
    for key in ("a", "b", "a", "b"):
        get(key, torch.arange(4))
    for key in ("x", "y", "x", "y"):  # another length: a and b are not asked for again
        get(key, torch.arange(5))
    assert calls == ["a", "b", "x", "y"]
