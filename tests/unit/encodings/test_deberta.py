"""DeBERTa disentangled attention (He et al. 2020): c2p and p2c against a hand computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from posx.encodings.deberta import DeBERTa
from posx.encodings.deberta_buckets import deberta_index, log_bucket_position
from posx.kernels import budget as budgets

H, D, S = 2, 4, 7


def delta(i: int, j: int, k: int) -> int:
    """The paper's delta(i, j): 0 if i-j <= -k, 2k-1 if i-j >= k, else i-j+k."""
    if i - j <= -k:
        return 0
    if i - j >= k:
        return 2 * k - 1
    return i - j + k


def test_index_is_the_papers_delta():
    pos = torch.arange(6)
    got = deberta_index(pos, pos, 2)
    expected = torch.tensor([[delta(i, j, 2) for j in range(6)] for i in range(6)])
    assert torch.equal(got, expected)


def hf_log_bucket(relative_pos, bucket_size, max_position):
    """DeBERTa-v2's make_log_bucket_position (numpy), for comparison."""
    sign = np.sign(relative_pos)
    mid = bucket_size // 2
    abs_pos = np.where((relative_pos < mid) & (relative_pos > -mid), mid - 1, np.abs(relative_pos))
    log_pos = np.ceil(np.log(abs_pos / mid) / np.log((max_position - 1) / mid) * (mid - 1)) + mid
    return np.where(abs_pos <= mid, relative_pos, log_pos * sign).astype(np.int64)


def test_log_buckets_match_deberta_v2():
    rel = np.arange(-300, 301)
    got = log_bucket_position(torch.from_numpy(rel), 32, 128).numpy()
    np.testing.assert_array_equal(got, hf_log_bucket(rel, 32, 128))


def reference(enc: DeBERTa, layer: int, q, k, v, pos):
    """A_ij = (Qc_i.Kc_j + Qc_i.Kr_{delta(i,j)} + Kc_j.Qr_{delta(j,i)}) / sqrt(3 d)."""
    kk = enc.max_relative_positions
    lay = enc.layers[layer]
    rel = enc.rel_embeddings.weight
    k_r = (rel @ lay.key_proj.weight.T).view(2 * kk, H, D)  # [2k, h, d]
    q_r = (rel @ lay.query_proj.weight.T).view(2 * kk, H, D)
    b = q.shape[0]
    out = torch.zeros_like(q)
    for bi in range(b):
        for hi in range(H):
            for i in range(S):
                scores = []
                for j in range(i + 1):
                    pi, pj = int(pos[i]), int(pos[j])
                    c2c = q[bi, hi, i] @ k[bi, hi, j]
                    c2p = q[bi, hi, i] @ k_r[delta(pi, pj, kk), hi]
                    p2c = k[bi, hi, j] @ q_r[delta(pj, pi, kk), hi]
                    scores.append((c2c + c2p + p2c) / math.sqrt(3 * D))
                p = torch.softmax(torch.stack(scores), 0)
                out[bi, hi, i] = p @ v[bi, hi, : i + 1]
    return out


@pytest.mark.parametrize("p2c_budget", [2**22, 0])  # p2c for all keys at once / per block
@pytest.mark.parametrize("block", [2, 256])
@pytest.mark.parametrize("pos", [torch.arange(S), torch.tensor([0, 1, 2, 5, 6, 9, 10])])
def test_c2p_and_p2c_match_hand_computation(block, pos, p2c_budget, monkeypatch):
    monkeypatch.setattr(budgets, "MAX_BLOCK_ELEMENTS", p2c_budget)
    gen = torch.Generator().manual_seed(0)
    enc = DeBERTa(d_model=H * D, n_heads=H, n_layers=2, max_relative_positions=3, block_size=block)
    with torch.no_grad():
        for p in enc.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    q, k, v = (torch.randn(2, H, S, D, generator=gen) for _ in range(3))
    with torch.no_grad():
        got = enc.for_layer(1).attend(q, k, v, pos, pos)
    torch.testing.assert_close(got, reference(enc, 1, q, k, v, pos), atol=1e-4, rtol=1e-4)


def test_shared_table_per_layer_projections_and_bad_buckets():
    enc = DeBERTa(d_model=8, n_heads=2, n_layers=3, max_relative_positions=4)
    assert enc.rel_embeddings.weight.shape == (8, 8)
    assert enc.for_layer(0) is not enc.for_layer(1)
    assert enc.layers[0].key_proj is not enc.layers[1].key_proj
    buckets = DeBERTa(
        d_model=8, n_heads=2, n_layers=1, max_relative_positions=64, position_buckets=8
    )
    assert buckets.rel_embeddings.weight.shape == (16, 8)
    with pytest.raises(ValueError, match="position_buckets"):
        DeBERTa(d_model=8, n_heads=2, n_layers=1, max_relative_positions=4, position_buckets=8)


def test_p2c_of_every_key_is_computed_once_per_layer(monkeypatch):
    """Within the budget, K^c . Q^r is one product for all keys, not one per query block
    (blocks of 2 queries made 4 here, each over all 2k relative rows), where positions are
    not consecutive (those read both terms by distance, test_deberta_shift.py)."""
    enc = DeBERTa(d_model=H * D, n_heads=H, n_layers=1, max_relative_positions=3, block_size=2)
    q, k, v = (torch.randn(1, H, S, D) for _ in range(3))
    products = []
    real_matmul = torch.Tensor.__matmul__

    def counting(a, b):
        if b.shape[-1] == 2 * 3 or a.shape[-2] == 2 * 3:  # a product with the 2k relative rows
            products.append((tuple(a.shape), tuple(b.shape)))
        return real_matmul(a, b)

    monkeypatch.setattr(torch.Tensor, "__matmul__", counting)
    gapped = torch.tensor([0, 1, 2, 5, 6, 9, 10])  # consecutive positions take no table
    with torch.no_grad():
        enc.attend(q, k, v, gapped, gapped)
    # one K^r product per block (c2p, [bq, 2k]) and a single p2c product over all S keys
    p2c = [shapes for shapes in products if shapes[0][-2] == S]
    assert len(p2c) == 1, products
