"""Self-Extend (Jin et al. 2024) on posx's RoPE: the position map is the paper's, the merged
attention scores each pair at that relative position, and a window covering the sequence is
plain RoPE.

``reference_map`` rebuilds the map the way the reference code (datamllab/LongLM,
``self_extend_patch/Llama.py``) does for a prefill: a lower-triangular neighbour mask with the
block ``[W:, :-W]`` of grouped pairs taken out of it, the grouped query positions
``i // G + W - W // G`` and key positions ``j // G``.
"""

from __future__ import annotations

import math

import pytest
import torch

from posx.encodings.rope import RoPE
from posx.kernels.self_extend import self_extend_distance

D, H = 8, 2


def reference_map(s: int, group: int, window: int) -> torch.Tensor:
    """``[s, s]`` relative positions as the reference code's masks and positions give them."""
    neighbour = torch.tril(torch.ones(s, s))
    if s - window > 0:
        neighbour[window:, :-window] -= torch.tril(torch.ones(s - window, s - window))
    pos = torch.arange(s)
    shift = 0 if pos.max() < window else window - window // group
    gq, gk = pos // group + shift, pos // group
    exact = pos[:, None] - pos[None, :]
    return torch.where(neighbour.bool(), exact, gq[:, None] - gk[None, :])


@pytest.mark.parametrize(("s", "group", "window"), [(40, 4, 8), (33, 3, 7), (16, 2, 16), (9, 5, 2)])
def test_distance_equals_the_papers_map(s: int, group: int, window: int) -> None:
    pos = torch.arange(s)
    got = self_extend_distance(pos, pos, group, window)
    visible = torch.tril(torch.ones(s, s, dtype=torch.bool))
    assert torch.equal(got[visible], reference_map(s, group, window)[visible])


def test_grouped_distances_continue_the_window() -> None:
    # at i - j = W the grouped distance starts near W (the shift's purpose), and it never
    # exceeds W + (i - W) / G + 1 (the positions it uses stay within the trained context)
    s, group, window = 200, 4, 16
    pos = torch.arange(s)
    dist = self_extend_distance(pos, pos, group, window)
    i = torch.arange(s)[:, None].expand(s, s)
    j = torch.arange(s)[None, :].expand(s, s)
    grouped = (i - j) >= window
    assert dist[grouped].max() <= window + (s - 1 - window) // group + 1
    assert (dist[grouped] >= window - window // group).all()


def self_extend(group: int, window: int) -> RoPE:
    scaling = {"type": "selfextend", "factor": group, "window": window}
    return RoPE(D, scaling=scaling, train_length=16)


def qkv(s: int, b: int = 2) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(7 + s)
    return tuple(torch.randn(b, H, s, D, generator=gen) for _ in range(3))


def brute_force(enc: RoPE, q, k, v, group: int, window: int) -> torch.Tensor:
    """Each pair scored by rotating the query by its Self-Extend distance, the key kept."""
    s = q.shape[-2]
    pos = torch.arange(s)
    dist = reference_map(s, group, window)
    logits = torch.full((*q.shape[:2], s, s), float("-inf"))
    for i in range(s):
        for j in range(i + 1):
            cos, sin = enc.cos_sin(dist[i, j].reshape(1))
            qi = enc.turn(q[..., i : i + 1, :], cos, sin)
            logits[..., i, j] = (qi @ k[..., j : j + 1, :].transpose(-1, -2))[..., 0, 0]
    del pos
    return (logits / math.sqrt(D)).softmax(-1) @ v


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize(("s", "group", "window"), [(24, 4, 6), (19, 3, 5)])
def test_attend_scores_each_pair_at_its_mapped_distance(s, group, window, grad) -> None:
    enc = self_extend(group, window)
    q, k, v = qkv(s)
    pos = torch.arange(s)
    with torch.set_grad_enabled(grad):  # with a gradient: explicit; without: fused far keys
        got = enc.attend(q, k, v, pos, pos)
    torch.testing.assert_close(got, brute_force(enc, q, k, v, group, window), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("grad", [True, False])
def test_window_covering_the_sequence_is_plain_rope(grad: bool) -> None:
    s = 30
    q, k, v = qkv(s)
    pos = torch.arange(s)
    plain = RoPE(D, train_length=16)
    qr, kr = plain.rotate(q, k, pos, pos)
    want = torch.nn.functional.scaled_dot_product_attention(qr, kr, v, is_causal=True)
    with torch.set_grad_enabled(grad):
        got = self_extend(4, s).attend(q, k, v, pos, pos)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("scaling", "message"),
    [
        ({"type": "selfextend", "factor": 2.5, "window": 4}, "whole number"),
        ({"type": "selfextend", "factor": 0.5, "window": 4}, ">= 1"),
        ({"type": "selfextend", "factor": 2, "window": 0}, "window must be >= 1"),
    ],
)
def test_bad_settings_are_refused(scaling: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RoPE(D, scaling=scaling, train_length=16)
