"""Shaw et al. 2018 relative positions against the paper's formula computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from posx.encodings.shaw import Shaw, shaw_index


def test_index_k2_on_8_tokens_matches_the_worked_example():
    """clip(j - i, -2, 2) + 2 for 8 tokens: row 0 is [2, 3, 4, 4, 4, 4, 4, 4], and so on."""
    expected = torch.tensor(
        [
            [2, 3, 4, 4, 4, 4, 4, 4],
            [1, 2, 3, 4, 4, 4, 4, 4],
            [0, 1, 2, 3, 4, 4, 4, 4],
            [0, 0, 1, 2, 3, 4, 4, 4],
            [0, 0, 0, 1, 2, 3, 4, 4],
            [0, 0, 0, 0, 1, 2, 3, 4],
            [0, 0, 0, 0, 0, 1, 2, 3],
            [0, 0, 0, 0, 0, 0, 1, 2],
        ]
    )
    pos = torch.arange(8)
    assert torch.equal(shaw_index(pos, pos, 2), expected)


def reference(enc: Shaw, q, k, v, pos):
    """e_ij = q_i.(k_j + w^K_r) / sqrt(d); z_i = sum_j a_ij (v_j + w^V_r), r = clip(j-i)+k."""
    b, h, s, d = q.shape
    kk = enc.max_relative_position
    layer = enc.layers[0]
    out = torch.zeros_like(q)
    for bi in range(b):
        p = pos[bi] if pos.dim() == 2 else pos
        for i in range(s):
            scores, vals = [], []
            for j in range(i + 1):
                r = max(-kk, min(kk, int(p[j] - p[i]))) + kk
                scores.append((q[bi, :, i] * (k[bi, :, j] + layer.w_k[r])).sum(-1) / math.sqrt(d))
                vals.append(v[bi, :, j] + layer.w_v[r])
            a = torch.softmax(torch.stack(scores, -1), -1)  # [h, i+1]
            out[bi, :, i] = (a.unsqueeze(-1) * torch.stack(vals, 1)).sum(1)
    return out


@pytest.mark.parametrize("block", [3, 256])
@pytest.mark.parametrize("per_row", [False, True])
def test_attend_matches_hand_computation(block, per_row):
    gen = torch.Generator().manual_seed(0)
    enc = Shaw(head_dim=4, n_layers=1, max_relative_position=2, block_size=block)
    with torch.no_grad():
        enc.layers[0].w_k.normal_(generator=gen)
        enc.layers[0].w_v.normal_(generator=gen)
    q, k, v = (torch.randn(2, 3, 7, 4, generator=gen) for _ in range(3))
    pos = (
        torch.tensor([[0, 1, 3, 4, 8, 9, 12], [0, 2, 3, 5, 6, 7, 11]])
        if per_row
        else torch.arange(7)
    )
    with torch.no_grad():
        torch.testing.assert_close(enc.attend(q, k, v, pos, pos), reference(enc, q, k, v, pos))


def test_distances_beyond_k_are_identical():
    """Spreading tokens further apart than k changes nothing; closer than k it does."""
    gen = torch.Generator().manual_seed(1)
    enc = Shaw(head_dim=4, n_layers=1, max_relative_position=2)
    q, k, v = (torch.randn(1, 2, 5, 4, generator=gen) for _ in range(3))
    with torch.no_grad():
        far = enc.attend(q, k, v, torch.arange(5) * 3, torch.arange(5) * 3)
        farther = enc.attend(q, k, v, torch.arange(5) * 100, torch.arange(5) * 100)
        near = enc.attend(q, k, v, torch.arange(5), torch.arange(5))
    torch.testing.assert_close(far, farther)
    assert not torch.allclose(far, near)


def test_per_layer_and_shared_tables():
    per_layer = Shaw(head_dim=4, n_layers=3, max_relative_position=2)
    shared = Shaw(head_dim=4, n_layers=3, max_relative_position=2, per_layer=False)
    assert per_layer.for_layer(0) is not per_layer.for_layer(2)
    assert shared.for_layer(0) is shared.for_layer(2)
    assert sum(p.numel() for p in per_layer.parameters()) == 3 * 2 * 5 * 4
    assert sum(p.numel() for p in shared.parameters()) == 2 * 5 * 4
    with pytest.raises(ValueError, match="max_relative_position"):
        Shaw(head_dim=4, n_layers=1, max_relative_position=0)
