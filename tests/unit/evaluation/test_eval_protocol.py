"""Full and sliding protocols: window plans, and scoring against a token-by-token brute force."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from posx.errors import ConfigError
from posx.evaluation.protocol import Protocol, plan_windows, resolve_protocol, score
from posx.tasks.base import Batch

VOCAB = 50  # make_tiny_model's vocabulary


def random_batch(n: int, length: int, seed: int = 0, mask_from: int = 0) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(VOCAB, (n, length + 1), generator=gen)
    mask = torch.zeros(n, length, dtype=torch.bool)
    mask[:, mask_from:] = True
    return Batch(tokens[:, :-1], tokens[:, 1:], mask)


@pytest.mark.parametrize(
    "length,window,stride", [(10, 4, 1), (10, 4, 3), (10, 4, 4), (9, 9, 2), (7, 20, 3), (33, 8, 5)]
)
def test_every_position_scored_exactly_once_with_the_most_context(length, window, stride):
    windows = plan_windows(length, window, stride)
    covered = [t for w in windows for t in range(w.score_from, w.end)]
    assert covered == list(range(length))  # once each, in order
    width = min(window, length)
    for w in windows:
        assert w.end - w.start == width and w.start <= w.score_from < w.end
    for w in windows[1:]:
        assert w.end - w.score_from <= stride  # each later window adds at most `stride`
        # token t is scored in the first window that holds it: no earlier window ends past it
        assert all(v.end <= w.score_from for v in windows if v.start < w.start)
    for w in windows:
        for t in range(w.score_from, w.end):
            assert t - w.start + 1 == expected_context(t, length, window, stride)


def expected_context(t: int, length: int, window: int, stride: int) -> int:
    """Tokens read to predict from position ``t``, from the definition (not the plan): the first
    window ``[0, W)`` gives ``t + 1``; past it, window ``k = ceil((t - W + 1) / S)`` ends at
    ``min(W + kS, L)`` and starts ``W`` before its end."""
    if t < window:
        return t + 1
    k = -(-(t - window + 1) // stride)
    return t - (min(window + k * stride, length) - window) + 1


def test_plan_windows_by_hand():
    assert [(w.start, w.score_from, w.end) for w in plan_windows(10, 4, 3)] == [
        (0, 0, 4),
        (3, 4, 7),
        (6, 7, 10),
    ]
    # the last window ends at the length and adds fewer than `stride` tokens
    assert [(w.start, w.score_from, w.end) for w in plan_windows(9, 4, 3)] == [
        (0, 0, 4),
        (3, 4, 7),
        (5, 7, 9),
    ]


def test_resolve_protocol_defaults_and_caps():
    assert resolve_protocol("full", 64, None, None, 16) == Protocol("full", 64, 64)
    assert resolve_protocol("sliding", 64, None, None, 16) == Protocol("sliding", 16, 8)
    assert resolve_protocol("sliding", 64, 32, 1, 16) == Protocol("sliding", 32, 1)
    assert resolve_protocol("sliding", 8, 32, 4, 16) == Protocol("sliding", 8, 8)  # one window
    with pytest.raises(ConfigError, match="unknown eval mode"):
        resolve_protocol("overlapping", 8, None, None, 16)


def brute_force(model, data: Batch, window: int, stride: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Loss per token [n, L] computed one window (one model call) at a time, by hand."""
    n, length = data.inputs.shape
    loss = torch.full((n, length), float("nan"))
    with torch.no_grad():
        for w in plan_windows(length, window, stride):
            logits = model(data.inputs[:, w.start : w.end])
            per = F.cross_entropy(
                logits.transpose(1, 2), data.targets[:, w.start : w.end], reduction="none"
            )
            loss[:, w.score_from : w.end] = per[:, w.score_from - w.start :]
    return loss, data.mask


@pytest.mark.parametrize("encoding", ["alibi", "rope", "t5"])
@pytest.mark.parametrize("window,stride,batch_tokens", [(8, 3, 17), (8, 1, 8), (40, 40, 1000)])
def test_sliding_scores_match_brute_force(make_tiny_model, encoding, window, stride, batch_tokens):
    model = make_tiny_model(encoding)
    data = random_batch(3, 21, mask_from=2)
    proto = resolve_protocol("sliding", 21, window, stride, 16)
    tally = score(model, data, proto, batch_tokens, torch.device("cpu"))
    loss, mask = brute_force(model, data, proto.window, proto.stride)
    per_position = torch.where(mask, loss, 0.0).sum(0).double()
    torch.testing.assert_close(tally.loss, per_position, atol=1e-4, rtol=1e-5)
    assert tally.count.tolist() == mask.sum(0).tolist()  # every scored token exactly once
    assert tally.seq_count.tolist() == mask.sum(1).tolist()
    windows = len(plan_windows(21, proto.window, proto.stride))
    assert tally.forward_tokens == 3 * windows * proto.window


@pytest.mark.parametrize("encoding", ["nope", "alibi", "t5"])
def test_window_covering_the_length_equals_full(make_tiny_model, encoding):
    model = make_tiny_model(encoding)
    data = random_batch(4, 24, seed=3)
    full = score(model, data, resolve_protocol("full", 24, None, None, 16), 48, torch.device("cpu"))
    slide = score(model, data, resolve_protocol("sliding", 24, 64, 5, 16), 48, torch.device("cpu"))
    assert torch.equal(full.loss, slide.loss) and torch.equal(full.hits, slide.hits)
    assert full.forward_tokens == slide.forward_tokens == 4 * 24


def test_exact_match_per_sequence(make_tiny_model):
    model = make_tiny_model("nope")
    data = random_batch(4, 6, mask_from=6)  # no scored tokens at all ...
    data.mask[0, 5] = True  # ... except one in sequence 0
    with torch.no_grad():
        pred = model(data.inputs[:1]).argmax(-1)[0, 5]
    data.targets[0, 5] = pred  # make it right
    tally = score(model, data, Protocol("full", 6, 6), 100, torch.device("cpu"))
    assert tally.exact.tolist() == [True, False, False, False]  # unscored rows never count


def test_max_context_is_the_longest_context_a_scored_token_had(make_tiny_model):
    model, cpu = make_tiny_model("nope"), torch.device("cpu")
    data = random_batch(3, 20)
    assert score(model, data, Protocol("full", 20, 20), 100, cpu).max_context == 20
    sliding = resolve_protocol("sliding", 20, 8, 3, 16)
    assert score(model, data, sliding, 100, cpu).max_context == 8  # never more than the window
    data.mask[:, 13:] = False  # a padded tail: nothing past position 12 is scored ...
    data.mask[1, 13:15] = True  # ... except up to position 14 in one sequence
    assert score(model, data, Protocol("full", 20, 20), 100, cpu).max_context == 15
