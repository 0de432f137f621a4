"""Transformer-XL's four-term score (Dai et al. 2019) against a hand computation."""

from __future__ import annotations

import math

import pytest
import torch

from posx.encodings import transformer_xl
from posx.encodings.transformer_xl import TransformerXL, distance_span, xl_sinusoid
from posx.kernels.blocked import blocked_bias_sdpa, sdpa_query_block
from posx.kernels.budget import MAX_BLOCK_ELEMENTS, SDPA_BLOCK_ELEMENTS
from posx.kernels.relative import relative_shift

H, D, R, S = 2, 4, 6, 6


def sinusoid_by_hand(distance: float, dim: int) -> torch.Tensor:
    """R_d = [sin(d w_f) for f < F] + [cos(d w_f) for f < F], w_f = 10000^(-2f/dim)."""
    w = [10000 ** (-2 * f / dim) for f in range(dim // 2)]
    return torch.tensor([math.sin(distance * x) for x in w] + [math.cos(distance * x) for x in w])


def test_sinusoid_matches_the_formula():
    for d in (0.0, 1.0, 5.0, 37.5):
        torch.testing.assert_close(xl_sinusoid(torch.tensor(d), 8), sinusoid_by_hand(d, 8))


def reference(enc: TransformerXL, layer: int, q, k, v, pos):
    """A_ij = q_i.k_j + q_i.W_R R_{i-j} + u.k_j + v.W_R R_{i-j}, scaled by 1/sqrt(d_h)."""
    w_r = enc.layers[layer].w_r  # [h, d_h, r]
    u, vb = enc.u[0], enc.v[0]
    b, h, s, d = q.shape
    out = torch.zeros_like(q)
    for bi in range(b):
        for hi in range(h):
            for i in range(s):
                scores = []
                for j in range(i + 1):
                    rel = w_r[hi] @ sinusoid_by_hand(float(pos[i] - pos[j]), w_r.shape[-1])
                    a = q[bi, hi, i] @ k[bi, hi, j]
                    bt = q[bi, hi, i] @ rel
                    c = u[hi] @ k[bi, hi, j]
                    dt = vb[hi] @ rel
                    scores.append((a + bt + c + dt) / math.sqrt(d))
                p = torch.softmax(torch.stack(scores), 0)
                out[bi, hi, i] = p @ v[bi, hi, : i + 1]
    return out


@pytest.mark.parametrize("pos", [torch.arange(S), torch.tensor([0, 3, 4, 9, 10, 20])])
def test_four_terms_match_hand_computation(pos):
    gen = torch.Generator().manual_seed(0)
    enc = TransformerXL(n_heads=H, head_dim=D, d_model=H * D, n_layers=2, r_dim=R)
    with torch.no_grad():
        for p in enc.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    q, k, v = (torch.randn(2, H, S, D, generator=gen) for _ in range(3))
    with torch.no_grad():
        got = enc.for_layer(1).attend(q, k, v, pos, pos)
    torch.testing.assert_close(got, reference(enc, 1, q, k, v, pos), atol=1e-4, rtol=1e-4)


def test_only_distances_matter_even_far_out():
    """Shifting every position by 10^5 leaves the scores unchanged (float64 angles)."""
    gen = torch.Generator().manual_seed(1)
    enc = TransformerXL(n_heads=H, head_dim=D, d_model=H * D, n_layers=1)
    with torch.no_grad():
        for p in enc.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    q, k, v = (torch.randn(1, H, S, D, generator=gen) for _ in range(3))
    pos = torch.arange(S)
    with torch.no_grad():
        near = enc.attend(q, k, v, pos, pos)
        far = enc.attend(q, k, v, pos + 100_000, pos + 100_000)
    torch.testing.assert_close(far, near, atol=1e-4, rtol=1e-4)


def test_shared_and_untied_uv():
    shared = TransformerXL(n_heads=H, head_dim=D, d_model=8, n_layers=3)
    untied = TransformerXL(n_heads=H, head_dim=D, d_model=8, n_layers=3, share_uv=False)
    assert shared.u.shape == (1, H, D) and untied.u.shape == (3, H, D)
    assert len(shared.layers) == len(untied.layers) == 3  # W_R per layer either way
    # u and v are counted once, not once per layer that reads them.
    assert sum(p.numel() for p in shared.parameters()) == 2 * H * D + 3 * H * D * 8
    with pytest.raises(ValueError, match="even"):
        TransformerXL(n_heads=H, head_dim=D, d_model=8, n_layers=1, r_dim=5)


@pytest.mark.parametrize(
    "pos",
    [torch.arange(S), torch.tensor([0, 3, 4, 9, 10, 20]), torch.tensor([[5, 6, 8, 9, 30, 31]] * 2)],
)
def test_integer_positions_take_the_distance_table_with_the_same_result(pos):
    """Integer positions read (b) + (d) from a table of distances; the feature route (any
    positions) gives the same scores."""
    gen = torch.Generator().manual_seed(2)
    enc = TransformerXL(n_heads=H, head_dim=D, d_model=H * D, n_layers=1, r_dim=R, block_size=4)
    with torch.no_grad():
        for p in enc.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    q, k, v = (torch.randn(2, H, S, D, generator=gen) for _ in range(3))
    assert distance_span(pos, pos) is not None
    with torch.no_grad():
        table = enc.attend(q, k, v, pos, pos)
        feature = enc._feature_attend(q, k, v, pos, pos, layer=0)
    torch.testing.assert_close(table, feature, atol=1e-5, rtol=1e-5)


def test_distance_span():
    assert distance_span(torch.arange(5), torch.arange(5)) == (0, 4)
    shuffled = torch.tensor([3, 0, 7, 1])  # visible pairs j <= i: distances -7..6
    assert distance_span(shuffled, shuffled) == (-6, 7 - 0)
    assert distance_span(torch.arange(5) * 1.5, torch.arange(5) * 1.5) is None  # fractional
    assert distance_span(torch.arange(5) * 2.0, torch.arange(5) * 2.0) == (0, 8)
    assert distance_span(torch.arange(5) * 1000, torch.arange(5) * 1000) is None  # too sparse


def one_layer(block: int, seed: int) -> tuple[TransformerXL, torch.Generator]:
    """A one-layer encoding with parameters large enough to matter, and the generator after."""
    gen = torch.Generator().manual_seed(seed)
    enc = TransformerXL(n_heads=H, head_dim=D, d_model=H * D, n_layers=1, r_dim=R)
    enc.block_size = block
    with torch.no_grad():
        for p in enc.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    return enc, gen


@pytest.mark.parametrize("block", [1, 2, 4, 256])
def test_consecutive_positions_read_the_shifted_product_without_a_gather(block, monkeypatch):
    """Positions one apart (any start, per row too) take the relative shift: no index tensor,
    no gather, and the hand computation's result."""
    enc, gen = one_layer(block, seed=4)
    q, k, v = (torch.randn(2, H, S, D, generator=gen) for _ in range(3))

    def no_gather(*args, **kwargs):
        raise AssertionError("consecutive positions should not gather per pair")

    monkeypatch.setattr(transformer_xl, "gather_relative", no_gather)
    rows = torch.stack([torch.arange(S) + 3, torch.arange(S) + 40])
    with torch.no_grad():
        got = enc.attend(q, k, v, rows, rows)
    for r in range(2):
        want = reference(enc, 0, q[r : r + 1], k[r : r + 1], v[r : r + 1], rows[r])
        torch.testing.assert_close(got[r : r + 1], want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("block", [1, 4, 256])
def test_evaluation_takes_the_fused_kernel_with_the_training_paths_result(block, monkeypatch):
    """Without a gradient, consecutive positions go through SDPA with terms (b) + (d) as its
    mask (issue 34); with one, through the blocked kernel. Both give the same attention."""
    enc, gen = one_layer(block, seed=5)
    q, k, v = (torch.randn(2, H, 9, D, generator=gen) for _ in range(3))
    pos = torch.arange(9) + 7
    trained = enc.attend(q, k, v, pos, pos)  # parameters need a gradient: blocked kernel
    assert trained.requires_grad

    def no_blocked(*args, **kwargs):
        raise AssertionError("evaluation should take the fused kernel")

    monkeypatch.setattr(transformer_xl, "blocked_attend", no_blocked)
    with torch.no_grad():
        evaluated = enc.attend(q, k, v, pos, pos)
    torch.testing.assert_close(evaluated, trained.detach(), atol=1e-5, rtol=1e-5)


def former_evaluation(enc: TransformerXL, q, k, v, layer: int = 0):
    """Evaluation at consecutive positions before issue 34's second round (commit ce6b4ec):
    terms (b) + (d) from a table of every distance s - 1 .. 1 - s, rebuilt each call, through
    SDPA in blocks of the explicit path's budget."""
    u, v_bias = enc.u[0].unsqueeze(1), enc.v[0].unsqueeze(1)
    w_r = enc.layers[layer].w_r
    scale = q.shape[-1] ** -0.5
    qu, qv = (q + u) * scale, (q + v_bias) * scale
    s = k.shape[-2]
    table = xl_sinusoid(torch.arange(s - 1, -s, -1), enc.r_dim)
    p_t = torch.einsum("nr,hdr->hdn", table, w_r.float()).to(q.dtype)

    def bias(i0: int, i1: int) -> torch.Tensor:
        rel = qv[..., i0:i1, :] @ p_t[..., s - i1 : s - 1 - i0 + i1]
        return relative_shift(rel, i1)

    return blocked_bias_sdpa(qu, k, v, bias, enc.block_size, 1.0)


@pytest.mark.parametrize("block", [1, 5, 64, 256])
@pytest.mark.parametrize("kind", ["from 0", "offset", "per row"])
@pytest.mark.parametrize(("b", "h", "s", "d"), [(1, 1, 1, 4), (2, 2, 9, 4), (2, 4, 70, 16)])
def test_evaluation_blocks_and_table_equal_the_former_evaluation(b, h, s, d, kind, block):
    """Blocks sized by sdpa_query_block and a table cut at 1 - step (issue 34): the former
    evaluation's result, for every start of the positions and block size."""
    gen = torch.Generator().manual_seed(s)
    enc = TransformerXL(n_heads=h, head_dim=d, d_model=h * d, n_layers=1, block_size=block)
    with torch.no_grad():
        for p in enc.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    q, k, v = (torch.randn(b, h, s, d, generator=gen) for _ in range(3))
    pos = {
        "from 0": torch.arange(s),
        "offset": torch.arange(s) + 500,
        "per row": torch.stack([torch.arange(s) + 9 * r for r in range(b)]),
    }[kind]
    with torch.inference_mode():
        for _ in range(2):  # the second call reads the remembered table
            got = enc.attend(q, k, v, pos, pos)
            torch.testing.assert_close(got, former_evaluation(enc, q, k, v))


def test_the_remembered_table_follows_the_parameters(monkeypatch):
    """The per-distance table is built once per layer and length while W_R is unchanged, and
    again after an in-place update (an optimizer step, a loaded state)."""
    enc, gen = one_layer(4, seed=6)
    q, k, v = (torch.randn(2, H, 12, D, generator=gen) for _ in range(3))
    pos = torch.arange(12)
    built = []
    table = enc._distance_table
    monkeypatch.setattr(enc, "_distance_table", lambda *a: built.append(a[0]) or table(*a))
    with torch.no_grad():
        enc.attend(q, k, v, pos, pos)
        enc.attend(q, k, v, pos, pos)
        assert built == [12]
        enc.layers[0].w_r.mul_(-2.0)
        got = enc.attend(q, k, v, pos, pos)
        assert built == [12, 12]
        torch.testing.assert_close(got, former_evaluation(enc, q, k, v))
        enc.attend(q[..., :7, :], k[..., :7, :], v[..., :7, :], pos[:7], pos[:7])
    assert built == [12, 12, 7]


def test_sdpa_query_block():
    """Blocks keep the bias near SDPA_BLOCK_ELEMENTS, at least 32 queries while the bias stays
    under MAX_BLOCK_ELEMENTS, at most half the keys and block_size."""
    assert sdpa_query_block(256, 2, 4, 1024) == SDPA_BLOCK_ELEMENTS // (2 * 4 * 1024) == 64
    assert sdpa_query_block(512, 2, 8, 1024) == 32
    assert sdpa_query_block(256, 32, 4, 64) == 32  # half of the 64 keys
    # the floor (the budget alone gives 4), within MAX_BLOCK_ELEMENTS: 31
    assert sdpa_query_block(256, 1, 4, 32768) == MAX_BLOCK_ELEMENTS // (4 * (32768 + 32)) == 31
    assert sdpa_query_block(256, 1, 16, 32768) == MAX_BLOCK_ELEMENTS // (16 * 32800) == 7
    assert sdpa_query_block(256, 64, 64, 32768) == 1
    assert sdpa_query_block(16, 1, 1, 1024) == 16
    assert sdpa_query_block(256, 1, 1, 1) == 1
