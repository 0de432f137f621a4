"""CoPE against its peers at 8-64 positions: the paper's code (Golovneva et al. 2024, causal mask
as ``+ log(tril)``) and x-transformers' (mask filled with the most negative float before the
gates), both written out here in float32 as they compute it, within 2e-6 on every output.

Position embeddings are drawn at std 0.15 (a trained model's scale rather than the 0.02 start):
there the peers themselves are up to 3e-6 from the formula in float64, so matching them within
2e-6 takes the same roundings, gates as ``torch.sigmoid`` computes them and positions rounded to
float32 as ``torch.cumsum`` hands them over. The C kernel's gates were 2 ulp from PyTorch's
(its own e^x) and its positions kept in double: it was 2.6e-6 from the peers here (2.4-4.7e-6 in
the issue's check) while the PyTorch route was within 1.5e-6.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import posx.kernels.cope.attention as kernel
from posx.encodings.cope import CoPE
from posx.kernels.cope import native as cope_native

TOLERANCE = 2e-6
CASES = list(itertools.product((16, 32, 64), (8, 16, 32, 64), range(3)))  # d, s, seed


def papers_code(q, k, v, emb, npos_max):
    """The paper's code: ``[b, h, s, d] -> [b, h, s, d]``."""
    s, d = q.shape[-2], q.shape[-1]
    logits = q @ k.transpose(-1, -2) / math.sqrt(d) + torch.ones(s, s).tril().log()
    gates = torch.sigmoid(logits)
    pos = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=npos_max - 1)
    logits_int = q @ emb
    w = pos - pos.floor()
    ceil = logits_int.gather(-1, pos.ceil().long())
    floor = logits_int.gather(-1, pos.floor().long())
    return torch.softmax(logits + ceil * w + floor * (1 - w), -1) @ v


def x_transformers(q, k, v, emb, npos_max):
    """x-transformers' attention with CoPE: the mask filled in before the gates are taken."""
    s, d = q.shape[-2], q.shape[-1]
    sim = torch.einsum("bhid,bhjd->bhij", q, k) * d**-0.5
    future = torch.ones(s, s, dtype=torch.bool).triu(1)
    sim = sim.masked_fill(future, -torch.finfo(sim.dtype).max)
    pos = sim.sigmoid().flip(-1).cumsum(-1).flip(-1).clamp(max=npos_max - 1)
    logits_int = torch.einsum("bhnd,dp->bhnp", q, emb)
    floor = pos.floor().long()
    w = pos - floor
    extra = logits_int.gather(-1, pos.ceil().long()) * w + logits_int.gather(-1, floor) * (1 - w)
    return (sim + extra).softmax(-1) @ v


def _largest_differences(grad: bool) -> dict[tuple, float]:
    """Over :data:`CASES`, the largest difference of ``CoPE.attend`` from either peer."""
    found = {}
    for d, s, seed in CASES:
        gen = torch.Generator().manual_seed(seed)
        enc = CoPE(head_dim=d, n_layers=1, train_length=s)
        with torch.no_grad():
            enc.layers[0].pos_emb.normal_(std=0.15, generator=gen)
        q, k, v = (torch.randn(2, 4, s, d, generator=gen) for _ in range(3))
        emb, pos = enc.layers[0].pos_emb.detach(), torch.arange(s)
        with torch.no_grad():
            peers = [peer(q, k, v, emb, s) for peer in (papers_code, x_transformers)]
        with torch.set_grad_enabled(grad):
            got = enc.attend(q.clone().requires_grad_(grad), k, v, pos, pos).detach()
        found[(d, s, seed)] = max((got - peer).abs().max().item() for peer in peers)
    return found


@pytest.mark.parametrize("route", ["native", "pytorch"])
@pytest.mark.parametrize("grad", [False, True], ids=["evaluation", "training"])
def test_within_the_peer_tolerance_at_8_to_64_positions(route, grad, monkeypatch):
    if route == "native" and not cope_native.available():
        pytest.skip("no C compiler here: the PyTorch routes are tested")
    if route == "native" and torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        # the kernel's gates follow SLEEF's vectorised expf, which torch takes with AVX2/AVX-512
        pytest.skip("torch.sigmoid takes another e^x on this CPU")
    calls: list[bool] = []
    real = cope_native.native_layer

    def spy(layer):
        fused = real(layer) if route == "native" else None
        calls.append(fused is not None)
        return fused

    monkeypatch.setattr(kernel, "native_layer", spy)  # training
    monkeypatch.setattr(cope_native, "native_layer", spy)  # evaluation, from cope_native()
    found = _largest_differences(grad)
    assert calls and all(calls) == (route == "native")  # the route under test ran
    over = {case: f"{err:.2e}" for case, err in found.items() if err > TOLERANCE}
    assert not over, f"(d, s, seed): difference from the peers above {TOLERANCE}: {over}"
