"""The disentangled-attention kernels equal a dense computation of the same logits.

``dense`` builds every pair's logit ``scale * (q_i . k_j + q_i . A_{i-j}) + k_j . B_{i-j}`` by
indexing the tables with the distance, masks the future and applies a plain softmax: no run,
strided view or hand-written backward in it. ``DisentangledAttention`` must match it in outputs
and in every gradient (and pass ``gradcheck`` in float64); ``shifted_terms`` must give the
same terms for any block layout.
"""

from __future__ import annotations

import pytest
import torch

from posx.kernels.disentangled import (
    DisentangledAttention,
    shifted_terms,
)


def dense(q, k, v, a, b_, scale):
    """Reference: ``a [h, s + 1, d]`` at distances ``s - 1`` down to ``-1``, ``b_`` at ``0`` up
    to ``s`` (the kernel's layout); future pairs masked."""
    s = q.shape[-2]
    dist = torch.arange(s).unsqueeze(-1) - torch.arange(s)  # i - j
    causal = dist >= 0
    a_pairs = a[:, (s - 1 - dist).clamp(0, s)]  # [h, s, s, d]
    b_pairs = b_[:, dist.clamp(0, s)]
    logits = scale * (q @ k.transpose(-1, -2) + torch.einsum("bhid,hijd->bhij", q, a_pairs))
    logits = logits + torch.einsum("bhjd,hijd->bhij", k, b_pairs)
    logits = logits.masked_fill(~causal, float("-inf"))
    return torch.softmax(logits, dim=-1) @ v


def _inputs(b, h, s, d, dtype=torch.float32, seed=0, fused=True):
    gen = torch.Generator().manual_seed(seed)
    if fused:  # q, k, v as the model makes them: strided views of one projection
        qkv = torch.randn(b, s, 3, h, d, generator=gen, dtype=dtype)
        q, k, v = (t.clone().requires_grad_(True) for t in qkv.permute(2, 0, 3, 1, 4))
        q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    else:
        q, k, v = (torch.randn(b, h, s, d, generator=gen, dtype=dtype) for _ in range(3))
    a = torch.randn(h, s + 1, d, generator=gen, dtype=dtype)
    b_ = torch.randn(h, s + 1, d, generator=gen, dtype=dtype) * 0.3
    return [t.requires_grad_(True) for t in (q, k, v, a, b_)]


@pytest.mark.parametrize(("b", "h", "s", "d"), [(1, 1, 1, 2), (2, 3, 5, 4), (3, 2, 17, 8)])
@pytest.mark.parametrize("fused", [True, False])
def test_one_node_equals_dense_outputs_and_every_gradient(b, h, s, d, fused):
    scale = 0.37
    results = []
    for fn in (DisentangledAttention.apply, dense):
        inputs = _inputs(b, h, s, d, seed=s, fused=fused)
        out = fn(*inputs, scale)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        results.append([out.detach(), *(t.grad for t in inputs)])
    for got, expected in zip(*results, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_one_node_backward_passes_gradcheck_in_float64():
    inputs = _inputs(2, 2, 6, 3, dtype=torch.float64, seed=3, fused=False)
    assert torch.autograd.gradcheck(
        lambda *t: DisentangledAttention.apply(*t, 0.5), inputs, eps=1e-6, atol=1e-6
    )


def test_one_node_backward_twice_with_retained_graph_is_the_same():
    """The backward leaves its saved tensors intact (a second backward sees the same)."""
    inputs = _inputs(2, 2, 9, 4, seed=1)
    out = DisentangledAttention.apply(*inputs, 0.25)
    grads = [torch.autograd.grad(out.sum(), inputs, retain_graph=True) for _ in range(2)]
    for first, second in zip(*grads, strict=True):
        torch.testing.assert_close(first, second, atol=0, rtol=0)


def _tables(a, b_, s):
    """The kernel's [h, s + 1, d] tables as ``shifted_terms`` reads them: ``a`` at ``s - 1``
    down to ``-s`` (distance ``-s`` is never a causal pair: any row), ``b_`` at ``1 - s`` up to
    ``s - 1`` (the negative distances are future pairs: any rows)."""
    a_t = torch.cat((a, a[:, -1:]), dim=1).transpose(-1, -2)  # [h, d, 2s]
    b_t = torch.cat((b_[:, 1:s].flip(1), b_[:, :s]), dim=1).transpose(-1, -2)  # [h, d, 2s - 1]
    return a_t, b_t


@pytest.mark.parametrize(("s", "step", "far"), [(1, 4, 2), (9, 3, 4), (20, 8, 5), (33, 16, 40)])
def test_shifted_terms_equal_dense(s, step, far):
    """Terms that vanish from ``far`` on (zero table rows), every block layout: every block's
    terms equal the dense pairs."""
    b, h, d, scale = 2, 3, 4, 0.4
    q, k, v, a, b_ = (t.detach() for t in _inputs(b, h, s, d, seed=s + step))
    a[:, : max(0, s - far)] = 0  # distances s - 1 down to far: row s - 1 - dist
    b_[:, far:] = 0
    a_t, b_t = _tables(a, b_, s)
    add_terms = shifted_terms(q * scale, k, a_t, b_t)
    dist = torch.arange(s).unsqueeze(-1) - torch.arange(s)
    pairs = scale * torch.einsum("bhid,hijd->bhij", q, a[:, (s - 1 - dist).clamp(0, s)])
    pairs = pairs + torch.einsum("bhjd,hijd->bhij", k, b_[:, dist.clamp(0, s)])
    for i0 in range(0, s, step):
        i1, j0 = min(s, i0 + step), max(0, i0 - far)
        out = torch.full((b, h, i1 - i0, i1 - j0), 7.0)
        add_terms(i0, i1, j0, out)
        causal = (dist[i0:i1, j0:i1] >= 0).expand_as(out)
        torch.testing.assert_close(out[causal] - 7.0, pairs[..., i0:i1, j0:i1][causal])
