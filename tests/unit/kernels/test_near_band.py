"""near_band_attend (issue 34) against a dense attention with the same relative terms."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from posx.kernels.near_band import near_band_attend


def dense(q, k, v, scale, near_keys, near_values, far_key, far_value) -> Tensor:
    """Every pair's key and value vector picked by distance, the [s, s] scores, causal softmax."""
    b, h, s, d = q.shape
    n = near_keys.shape[0]
    zero = torch.zeros(d)
    rows_k = torch.cat([(zero if far_key is None else far_key).unsqueeze(0), near_keys.flip(0)])
    near_v = torch.zeros(n, d) if near_values is None else near_values
    rows_v = torch.cat([(zero if far_value is None else far_value).unsqueeze(0), near_v.flip(0)])
    dist = torch.arange(s).unsqueeze(-1) - torch.arange(s)  # i - j
    slot = torch.where(dist < n, dist + 1, 0).clamp(min=0)  # 1 + distance near, 0 far
    a_k, a_v = rows_k[slot], rows_v[slot]  # [s, s, d]
    logits = scale * (
        torch.einsum("bhid,bhjd->bhij", q, k) + torch.einsum("bhid,ijd->bhij", q, a_k)
    )
    probs = torch.softmax(logits.masked_fill(dist < 0, float("-inf")), dim=-1)
    return probs @ v + torch.einsum("bhij,ijd->bhid", probs, a_v)


@pytest.mark.parametrize("terms", ["all", "keys only", "no far"])
@pytest.mark.parametrize(
    ("b", "h", "s", "d", "n"),
    [
        (1, 1, 1, 4, 1),
        (2, 3, 7, 4, 3),
        (1, 2, 40, 8, 1),
        (2, 2, 50, 8, 16),
        (1, 2, 45, 8, 20),
        (2, 1, 10, 4, 10),
    ],
)
def test_equals_the_dense_attention(b, h, s, d, n, terms):
    gen = torch.Generator().manual_seed(s * n)
    q, k, v = (torch.randn(b, h, s, d, generator=gen) for _ in range(3))
    near_keys, near_values = (torch.randn(n, d, generator=gen) for _ in range(2))
    far_key, far_value = (torch.randn(d, generator=gen) for _ in range(2))
    if terms == "keys only":
        near_values = far_value = None
    if terms == "no far":
        far_key = far_value = None
    args = (q, k, v, d**-0.5, near_keys, near_values, far_key, far_value)
    with torch.no_grad():
        torch.testing.assert_close(near_band_attend(*args), dense(*args))
