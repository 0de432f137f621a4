"""CoPE's kernel (posx/kernels/cope/attention.py) against the former implementation, kept here as
the reference: autograd's graph of the formula over blocked_attend. Outputs and every gradient
(q, k, v, the position embeddings) are compared on several shapes, kinds of positions (from 0,
offset, different per row, with gaps, shuffled), blocked and unblocked, with and without
gradients; the routes of the kernel (explicit, fused, band with its fallback) are each seen
to run."""

from __future__ import annotations

import copy
import zlib

import pytest
import torch
from torch import Tensor

import posx.kernels.cope.attention as kernel
from posx.encodings.cope import CoPE, position_gaps
from posx.kernels.blocked import blocked_attend, future_bias


def _reference_positions(gates: Tensor, gaps: Tensor | None) -> Tensor:
    if gaps is None:
        return gates.cumsum(-1)
    if gaps.dim() == 2:
        gaps = gaps[:, None, None, :]
    weighted = gates * gaps
    return weighted.cumsum(-1) - weighted + gates


def _reference_interpolate(logits_int: Tensor, positions: Tensor) -> Tensor:
    steps = torch.cat((logits_int.diff(dim=-1), torch.zeros_like(logits_int[..., :1])), dim=-1)
    below = positions.long()
    lo = torch.gather(logits_int, -1, below)
    return lo.addcmul_(torch.frac(positions), torch.gather(steps, -1, below))


def reference_attend(enc: CoPE, q, k, v, k_pos, layer: int = 0) -> Tensor:
    """The former ``CoPE.layer_attend``, as it was before the kernel."""
    scale = q.shape[-1] ** -0.5
    s = k.shape[-2]
    k_rev_t = k.to(q.dtype).flip(-2).transpose(-1, -2).contiguous()
    gaps = position_gaps(k_pos).flip(-1) if enc.gap_weighted else None
    if gaps is not None and bool((gaps == 1).all()):
        gaps = None
    emb = enc.layers[layer].pos_emb.to(q.dtype)

    def scores(i0: int, i1: int, j0: int) -> tuple[Tensor, None]:
        qb = q[..., i0:i1, :]
        kb_t = k_rev_t[..., s - i1 : s - j0]
        logits = (qb @ kb_t) * scale
        logits[..., : i1 - i0] += future_bias(i0, i1, q.device, i0).flip(-1)
        gates = torch.sigmoid(logits)
        block_gaps = None if gaps is None else gaps[..., s - i1 : s - j0]
        positions = _reference_positions(gates, block_gaps).clamp_(0, enc.npos_max - 1)
        logits += _reference_interpolate(qb @ emb, positions)
        return logits.flip(-1), None

    return blocked_attend(v, scores, enc.block_size)


def _positions(kind: str, b: int, s: int, gen: torch.Generator) -> Tensor:
    if kind == "from0":
        return torch.arange(s)
    if kind == "offset":
        return torch.arange(s) + 7
    if kind == "per_row":  # row 0 consecutive, row 1 every third position from 3
        return torch.stack(
            [torch.arange(s) if r == 0 else torch.arange(s) * 3 + 3 for r in range(b)]
        )
    if kind == "gaps":  # sorted, with gaps of 1 to 4
        return torch.cumsum(torch.randint(1, 5, (s,), generator=gen), 0)
    if kind == "shuffled":  # negative gaps: positions clamped at 0 from below
        return torch.randperm(s, generator=gen)
    raise AssertionError(kind)


def _inputs(b, h, s, d, npos_max, block, gen, std=1.0):
    enc = CoPE(head_dim=d, n_layers=1, train_length=s, npos_max=npos_max, block_size=block)
    with torch.no_grad():
        enc.layers[0].pos_emb.normal_(generator=gen)
    q, k, v = (torch.randn(b, h, s, d, generator=gen) * std for _ in range(3))
    return enc, q, k, v


def assert_near(got: Tensor, ref: Tensor, rel: float, name: str = "") -> None:
    """Equal up to ``rel`` of the reference's largest magnitude: float32 rounding, which the
    two implementations meet in different orders. (With shuffled positions the gaps reach
    +-s and the gradients cancel: both are ~1e-5 of the largest gradient from float64.)"""
    assert got.shape == ref.shape
    worst = (got - ref).abs().max().item()
    assert worst <= rel * ref.abs().max().item(), f"{name}: {worst} > {rel} * {ref.abs().max()}"


def assert_as_accurate_as(got: Tensor, ref32: Tensor, ref64: Tensor, name: str = "") -> None:
    """``got`` is as close to ``ref64`` (float64) as ``ref32`` (float32) is, within 4x, plus
    1e-6, as relative errors in norm. Positions are sums of up to s gates (with gaps, of gates
    times gaps up to +-s), and the interpolation's slope multiplies their rounding: an
    implementation that adds in another order than PyTorch's kernels has its own float32 error
    of the same size (the largest single element's error moved by 10x between seeds)."""
    reference = ref64.norm().item()
    own = (ref32.double() - ref64).norm().item() / reference
    error = (got.double() - ref64).norm().item() / reference
    assert error <= 4 * own + 1e-6, f"{name}: {error:.2e} (float32 PyTorch: {own:.2e})"


def assert_as_accurate(got: Tensor, enc: CoPE, q: Tensor, k: Tensor, v: Tensor, pos) -> None:
    """:func:`assert_as_accurate_as` the former implementation in float32 and float64."""
    ref32 = reference_attend(enc, q, k, v, pos)
    ref64 = reference_attend(copy.deepcopy(enc).double(), q.double(), k.double(), v.double(), pos)
    assert_as_accurate_as(got, ref32, ref64)


SHAPES = [  # b, h, s, d, npos_max, block
    (2, 3, 8, 4, 16, 256),
    (2, 3, 8, 4, 3, 3),
    (1, 2, 37, 8, 6, 256),
    (2, 2, 37, 8, 6, 5),
    (2, 1, 70, 4, 4, 16),
    (1, 2, 129, 16, 32, 40),
]
KINDS = ["from0", "offset", "per_row", "gaps", "shuffled"]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", KINDS)
def test_outputs_and_gradients_equal_the_former_implementation(shape, kind, monkeypatch):
    """The PyTorch routes (the C kernel off): outputs within 1e-5, gradients within 3e-5."""
    monkeypatch.setattr(kernel, "native_layer", lambda *args: None)
    monkeypatch.setattr(kernel, "cope_native", lambda *args: None)
    gen = torch.Generator().manual_seed(zlib.crc32(repr((shape, kind)).encode()))
    b, h, s, d, npos_max, block = shape
    enc, q, k, v = _inputs(b, h, s, d, npos_max, block, gen)
    pos = _positions(kind, b, s, gen)
    leaves = [t.requires_grad_() for t in (q, k, v)]
    weights = torch.randn(b, h, s, d, generator=gen)
    emb = enc.layers[0].pos_emb
    got = enc.attend(q, k, v, pos, pos)
    ref = reference_attend(enc, q, k, v, pos)
    assert_near(got, ref, 1e-5)
    grads = torch.autograd.grad((got * weights).sum(), [*leaves, emb])
    ref_grads = torch.autograd.grad((ref * weights).sum(), [*leaves, emb])
    for name, a, r in zip(["q", "k", "v", "emb"], grads, ref_grads, strict=True):
        assert_near(a, r, 3e-5, name)
    with torch.no_grad():  # the fused and band routes
        assert_near(enc.attend(q, k, v, pos, pos), ref, 1e-5)


class _Routes:
    """Counts which route each block of the PyTorch routes took (the fused C kernel, tested in
    tests/unit/kernels/test_cope_native.py, is turned off: these are its fallback)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(kernel, "cope_native", lambda *args: None)
        monkeypatch.setattr(kernel, "native_layer", lambda *args: None)
        self.calls: dict[str, int] = {"band": 0, "band_declined": 0, "fused": 0, "explicit": 0}
        band, fused, explicit = kernel._band, kernel._fused, kernel._scores

        def spy_band(*args):
            out = band(*args)
            self.calls["band" if isinstance(out, Tensor) else "band_declined"] += 1
            return out

        def counted(name, fn):
            def spy(*args):
                self.calls[name] += 1
                return fn(*args)

            return spy

        monkeypatch.setattr(kernel, "_band", spy_band)
        monkeypatch.setattr(kernel, "_fused", counted("fused", fused))
        monkeypatch.setattr(kernel, "_scores", counted("explicit", explicit))


@pytest.mark.parametrize(
    ("std", "declined"),
    [(0.3, False), (1.5, True)],  # gates near 1/2: saturated in the band; spread: some not
)
@pytest.mark.parametrize("kind", ["from0", "offset"])
def test_band_route_equals_the_former_implementation(monkeypatch, std, declined, kind):
    """Long sequences with few integer positions: blocks past ``2 npos_max`` queries take the
    band route (keys further back through the flash kernel), or decline it and take the fused
    one when some query's position has not reached the top within the band."""
    routes = _Routes(monkeypatch)
    gen = torch.Generator().manual_seed(5)
    b, h, s, d = 2, 3, 300, 8
    enc, q, k, v = _inputs(b, h, s, d, npos_max=8, block=16, gen=gen, std=std)
    pos = _positions(kind, b, s, gen)
    with torch.no_grad():
        ref = reference_attend(enc, q, k, v, pos)
        got = enc.attend(q, k, v, pos, pos)
    assert_near(got, ref, 1e-5)
    assert routes.calls["band"] > 0 and routes.calls["explicit"] == 0
    assert (routes.calls["band_declined"] > 0) == declined


def test_routes_by_gradient_and_gaps(monkeypatch):
    """With gradients every block is explicit; without, fused, and band only for unit gaps."""
    routes = _Routes(monkeypatch)
    gen = torch.Generator().manual_seed(6)
    enc, q, k, v = _inputs(1, 2, 200, 8, npos_max=8, block=32, gen=gen, std=0.3)
    gapped = torch.arange(200) * 2
    with torch.no_grad():
        enc.attend(q, k, v, gapped, gapped)
    assert routes.calls == {"band": 0, "band_declined": 0, "fused": 7, "explicit": 0}
    enc.attend(q.requires_grad_(), k, v, gapped, gapped)
    assert routes.calls["explicit"] == 7


def test_clamped_at_the_top_in_training_has_the_formers_gradient():
    """Positions past ``npos_max - 1`` (most pairs at npos_max 2 and 40 keys): no slope."""
    gen = torch.Generator().manual_seed(7)
    enc, q, k, v = _inputs(2, 2, 40, 4, npos_max=2, block=256, gen=gen)
    emb = enc.layers[0].pos_emb
    q.requires_grad_()
    pos = torch.arange(40)
    got = torch.autograd.grad(enc.attend(q, k, v, pos, pos).square().sum(), [q, emb])
    ref = torch.autograd.grad(reference_attend(enc, q, k, v, pos).square().sum(), [q, emb])
    for a, r in zip(got, ref, strict=True):
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["from0", "gaps", "shuffled"])
def test_backward_gradcheck(kind):
    """The hand-written backward, in float64, against finite differences: several blocks,
    clamping at the top (npos_max 3), with gaps and negative ones."""
    gen = torch.Generator().manual_seed(8)
    b, h, s, d = 2, 2, 9, 4
    q, k, v = (torch.randn(b, h, s, d, generator=gen, dtype=torch.float64) for _ in range(3))
    emb = torch.randn(d, 3, generator=gen, dtype=torch.float64)
    pos = _positions(kind, b, s, gen)
    gaps = None if kind == "from0" else position_gaps(pos).double()
    leaves = [t.requires_grad_() for t in (q, k, v, emb)]

    def attend(q, k, v, emb):
        return kernel.cope_attention(q, k, v, emb, 3, gaps, block_size=4)

    assert torch.autograd.gradcheck(attend, leaves)


@pytest.mark.parametrize("kind", ["from0", "per_row"])
def test_explicit_route_without_gradient(monkeypatch, kind):
    """Off the CPU (no flash kernel) evaluation takes the explicit route, as training does."""
    routes = _Routes(monkeypatch)
    monkeypatch.setattr(kernel, "flash_available", lambda device: False)
    gen = torch.Generator().manual_seed(9)
    enc, q, k, v = _inputs(2, 2, 50, 8, npos_max=6, block=16, gen=gen)
    pos = _positions(kind, 2, 50, gen)
    with torch.no_grad():
        assert_near(enc.attend(q, k, v, pos, pos), reference_attend(enc, q, k, v, pos), 1e-5)
    assert routes.calls["explicit"] == 4 and routes.calls["fused"] == routes.calls["band"] == 0
