"""S²-Attn (LongLoRA): the keys each head sees are the paper's groups (the second half of the
heads shifted by half a group, no key after its query), and one group is full causal attention."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from posx.kernels.shifted_sparse import shifted_sparse_attention, visible


def seen_keys(s: int, group: int, heads: int = 4) -> torch.Tensor:
    """Bool ``[h, s, s]``: which keys each query of each head reads, measured: equal scores
    (q = k = 0) over one-hot values make each output row the mean of the keys it sees."""
    q = k = torch.zeros(1, heads, s, 8)
    v = torch.eye(s).expand(1, heads, s, s)
    return shifted_sparse_attention(q, k, v, group)[0] > 0


def paper(s: int, group: int, shifted: bool) -> torch.Tensor:
    """The definition: same group (shifted heads: groups start G/2 later), key not after query."""
    i = torch.arange(s)[:, None]
    j = torch.arange(s)[None, :]
    shift = group // 2 if shifted else 0
    return (j <= i) & ((i + shift) // group == (j + shift) // group)


@pytest.mark.parametrize(("s", "group"), [(16, 4), (24, 8), (12, 6), (32, 8)])
def test_each_head_sees_the_papers_groups(s, group):
    seen = seen_keys(s, group)
    for head in range(4):
        assert torch.equal(seen[head], paper(s, group, shifted=head >= 2)), head
    assert torch.equal(visible(s, group, True), paper(s, group, True))
    # the shifted groups overlap the plain ones: a token reads across a plain group's edge
    assert seen[2, group, group - 1] and not seen[0, group, group - 1]


def test_one_group_is_full_causal_attention():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8, generator=gen) for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(shifted_sparse_attention(q, k, v, 16), want)
    assert torch.equal(
        seen_keys(16, 16), torch.ones(16, 16, dtype=torch.bool).tril().expand(4, 16, 16)
    )


def test_gradients_flow_and_bad_shapes_are_refused():
    q, k, v = (torch.randn(1, 4, 16, 8, requires_grad=True) for _ in range(3))
    shifted_sparse_attention(q, k, v, 4).sum().backward()
    assert q.grad is not None and k.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="cannot be halved"):
        shifted_sparse_attention(q[:, :3], k[:, :3], v[:, :3], 4)
    with pytest.raises(ValueError, match="multiple of the group"):
        shifted_sparse_attention(q, k, v, 5)
