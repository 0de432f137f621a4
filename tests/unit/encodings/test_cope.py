"""CoPE (Golovneva et al. 2024): gates, fractional positions and interpolation by hand."""

from __future__ import annotations

import math

import pytest
import torch

from posx.encodings.cope import CoPE, cope_positions, interpolate_logits


def test_positions_are_suffix_sums_of_gates():
    # Query 2 sees keys 0, 1, 2 with gates 0.5, 0.25, 1.0 -> p = [1.75, 1.25, 1.0].
    gates = torch.tensor([[1.0, 0.0, 0.0], [0.5, 1.0, 0.0], [0.5, 0.25, 1.0]]).view(1, 1, 3, 3)
    expected = torch.tensor([[1.0, 0.0, 0.0], [1.5, 1.0, 0.0], [1.75, 1.25, 1.0]])
    torch.testing.assert_close(cope_positions(gates)[0, 0], expected)


def test_gap_weighted_positions():
    """Open gates give pos_i - pos_j + 1; unit gaps give the paper's suffix sums."""
    pos = torch.tensor([0.0, 2.0, 3.0, 7.0])
    gaps = torch.cat((torch.ones(1), pos.diff()))
    ones = torch.ones(1, 1, 4, 4).tril()
    got = cope_positions(ones, gaps)[0, 0]
    expected = (pos[:, None] - pos[None, :] + 1).tril()
    torch.testing.assert_close(got, expected)
    gates = torch.rand(1, 2, 4, 4, generator=torch.Generator().manual_seed(0)).tril()
    torch.testing.assert_close(cope_positions(gates, torch.ones(4)), cope_positions(gates))


def test_interpolation_between_integer_positions():
    logits_int = torch.tensor([0.0, 10.0, 20.0, 30.0]).view(1, 1, 1, 4)
    positions = torch.tensor([1.75, 0.0, 3.0, 2.5]).view(1, 1, 1, 4)
    got = interpolate_logits(logits_int, positions)
    torch.testing.assert_close(got.flatten(), torch.tensor([17.5, 0.0, 30.0, 25.0]))


def reference(enc: CoPE, q, k, v):
    """The paper's code, unblocked: logits = qk/sqrt(d) + log(causal mask); gates = sigmoid(logits);
    p = flip-cumsum-flip(gates) clamped; logits += interp(q @ e, p); softmax; @ v."""
    s, d = q.shape[-2], q.shape[-1]
    logits = q @ k.transpose(-1, -2) / math.sqrt(d)
    logits = logits + torch.ones(s, s).tril().log()
    gates = torch.sigmoid(logits)
    pos = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=enc.npos_max - 1)
    logits_int = q @ enc.layers[0].pos_emb
    w = pos - pos.floor()
    extra = logits_int.gather(-1, pos.ceil().long()) * w + logits_int.gather(
        -1, pos.floor().long()
    ) * (1 - w)
    return torch.softmax(logits + extra, -1) @ v


@pytest.mark.parametrize("block", [3, 256])
@pytest.mark.parametrize("npos_max", [3, 16])
def test_attend_matches_the_papers_code(block, npos_max):
    gen = torch.Generator().manual_seed(0)
    enc = CoPE(head_dim=4, n_layers=1, train_length=8, npos_max=npos_max, block_size=block)
    with torch.no_grad():
        enc.layers[0].pos_emb.normal_(generator=gen)
    q, k, v = (torch.randn(2, 3, 8, 4, generator=gen) for _ in range(3))
    pos = torch.arange(8)
    with torch.no_grad():
        torch.testing.assert_close(enc.attend(q, k, v, pos, pos), reference(enc, q, k, v))


def test_gap_weighting_off_ignores_positions():
    gen = torch.Generator().manual_seed(1)
    enc = CoPE(head_dim=4, n_layers=1, train_length=16, gap_weighted=False)
    q, k, v = (torch.randn(1, 2, 5, 4, generator=gen) for _ in range(3))
    with torch.no_grad():
        a = enc.attend(q, k, v, torch.arange(5), torch.arange(5))
        b = enc.attend(q, k, v, torch.arange(5) * 7, torch.arange(5) * 7)
    torch.testing.assert_close(a, b)


def test_npos_max_defaults_to_train_length_and_layers():
    enc = CoPE(head_dim=4, n_layers=2, train_length=32)
    assert enc.npos_max == 32 and enc.for_layer(0) is not enc.for_layer(1)
    assert [tuple(p.shape) for p in enc.parameters()] == [(4, 32), (4, 32)]
    shared = CoPE(head_dim=4, n_layers=2, train_length=32, npos_max=8, per_layer=False)
    assert shared.for_layer(0) is shared.for_layer(1) and shared.npos_max == 8
    assert [tuple(p.shape) for p in shared.parameters()] == [(4, 8)]
    with pytest.raises(ValueError, match="npos_max"):
        CoPE(head_dim=4, n_layers=1, train_length=32, npos_max=1)


def test_scores_stay_float32_under_bf16_autocast():
    """Gates, positions and logits are computed in float32 even under autocast: a bf16 q.k
    misplaces the summed positions (5% output error at 64 keys before the fix; 0.3% now, the
    bf16 probabilities @ v)."""
    torch.manual_seed(0)
    enc = CoPE(head_dim=16, n_layers=1, train_length=256, gap_weighted=True, block_size=64)
    with torch.no_grad():
        enc.layers[0].pos_emb.normal_(std=0.5)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (2 * torch.randn(2, 3, 64, 16, generator=gen) for _ in range(3))
    pos = torch.arange(64) * 4
    with torch.no_grad():
        ref = enc.attend(q, k, v, pos, pos)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = enc.attend(q, k, v, pos, pos)
    assert got.shape == ref.shape
    assert (got.float() - ref).norm() / ref.norm() < 0.01


def test_unit_gaps_take_the_plain_cumulative_sum():
    """Positions one apart weigh every gate by 1: gap weighting on computes exactly what it
    computes off (the paper's suffix sum), rather than the weighted sum's rounding of it."""
    gen = torch.Generator().manual_seed(2)
    on, off = (
        CoPE(head_dim=4, n_layers=1, train_length=64, gap_weighted=g, block_size=5)
        for g in (True, False)
    )
    with torch.no_grad():
        off.layers[0].pos_emb.copy_(on.layers[0].pos_emb)
    q, k, v = (torch.randn(2, 3, 64, 4, generator=gen) * 3 for _ in range(3))
    pos = torch.arange(64) + 7
    with torch.no_grad():
        assert torch.equal(on.attend(q, k, v, pos, pos), off.attend(q, k, v, pos, pos))
