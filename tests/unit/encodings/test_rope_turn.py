"""RoPE's rotation as one autograd node (issue 34) against the autograd graph it replaced.

``reference_rotate`` is the former ``RoPE.rotate``: the rotation looked up per call and applied
by :meth:`RoPE.turn_with` (a complex multiply that autograd differentiates). The fast path must
give the same outputs and the same gradients for q and k, for every scaling, partial rotary,
per-row and fractional positions, and q/k as the model makes them (strided views of one fused
qkv projection) or contiguous.
"""

from __future__ import annotations

import pytest
import torch

from posx.encodings.rope import RoPE
from posx.kernels.rotary import qk_rows as _qk_rows

B, H, S, DH = 2, 3, 12, 8


def reference_rotate(enc: RoPE, q, k, q_pos, k_pos):
    seq_len = enc._dynamic_len(q_pos, k_pos)

    def rotation(pos, dtype):
        return enc.rotation(*enc.cos_sin(pos, seq_len), dtype).unsqueeze(pos.dim() - 1)

    return enc.turn_with(q, rotation(q_pos, q.dtype)), enc.turn_with(k, rotation(k_pos, k.dtype))


def qkv_views(dtype: torch.dtype, seed: int, strided: bool):
    """q, k, v ``[b, h, s, d_h]`` as the model makes them, and the leaf they come from."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(B, S, 3 * H * DH, generator=gen, dtype=dtype, requires_grad=True)
    q, k, v = x.view(B, S, 3, H, DH).permute(2, 0, 3, 1, 4)
    if not strided:
        q, k = q.contiguous(), k.contiguous()
    return x, q, k


def run(enc: RoPE, rotate, q_pos, k_pos, dtype=torch.float32, strided=True, grads="bhsd"):
    """Rotated q, k and the gradient of the qkv leaf, with incoming gradients laid out as
    ``[b, h, s, d_h]`` or ``[b, s, h, d_h]`` in memory (SDPA's backward returns either)."""
    x, q, k = qkv_views(dtype, 0, strided)
    qr, kr = rotate(enc, q, k, q_pos, k_pos)
    gen = torch.Generator().manual_seed(1)
    shape = qr.shape if grads == "bhsd" else (B, S, H, DH)
    gq, gk = (torch.randn(shape, generator=gen, dtype=dtype) for _ in range(2))
    if grads == "bshd":
        gq, gk = gq.transpose(1, 2), gk.transpose(1, 2)
    torch.autograd.backward((qr, kr), (gq, gk))
    return qr.detach(), kr.detach(), x.grad


def fast_rotate(enc, q, k, q_pos, k_pos):
    return enc.rotate(q, k, q_pos, k_pos)


SCALINGS = [
    None,
    {"type": "linear", "factor": 2.0},
    {"type": "ntk", "factor": 4.0},
    {"type": "yarn", "factor": 4.0},  # attention scale != 1
    {"type": "llama3", "factor": 8.0},
    {"type": "dynamic_ntk", "factor": 2.0},
]


@pytest.mark.parametrize("scaling", SCALINGS, ids=lambda s: s["type"] if s else "none")
@pytest.mark.parametrize("per_head", [True, False])
@pytest.mark.parametrize("fraction", [1.0, 0.5])
@pytest.mark.parametrize("strided", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("grads", ["bhsd", "bshd"])
def test_fast_rotation_equals_the_autograd_reference(
    scaling, per_head, fraction, strided, dtype, grads
):
    # train_length 4 < S: dynamic NTK rescales, and the yarn/llama3 ramps are exercised
    enc = RoPE(DH, rotary_fraction=fraction, scaling=scaling, train_length=4)
    if not per_head:  # as at long lengths: the rotation broadcast over heads, no copies
        enc.head_form_elements = 0
    pos = torch.arange(S)
    want = run(enc, reference_rotate, pos, pos, dtype, strided, grads)
    got = run(enc, fast_rotate, pos, pos, dtype, strided, grads)
    for w, g in zip(want, got, strict=True):
        torch.testing.assert_close(g, w)  # float rounding: vectorised vs scalar loops


@pytest.mark.parametrize("kind", ["per_row", "q_k_differ", "fractional", "offset"])
@pytest.mark.parametrize("grads", ["bhsd", "bshd"])
def test_fast_rotation_at_explicit_positions(kind, grads):
    enc = RoPE(DH, rotary_fraction=0.5, scaling={"type": "yarn", "factor": 2.0}, train_length=8)
    gen = torch.Generator().manual_seed(3)
    if kind == "per_row":
        q_pos = k_pos = torch.randint(0, 100, (B, S), generator=gen)
    elif kind == "q_k_differ":
        q_pos, k_pos = torch.arange(S) + 5, torch.arange(S)
    elif kind == "fractional":
        q_pos = k_pos = torch.rand(B, S, generator=gen) * 40
    else:
        q_pos = k_pos = torch.arange(S) + 1000
    want = run(enc, reference_rotate, q_pos, k_pos, grads=grads)
    got = run(enc, fast_rotate, q_pos, k_pos, grads=grads)
    for w, g in zip(want, got, strict=True):
        torch.testing.assert_close(g, w)  # float rounding: vectorised vs scalar loops


def test_fast_rotation_keeps_nothing_of_the_input_for_backward():
    # One node for q and k; it saves no activation (only the memoised conjugates, on ctx).
    enc = RoPE(DH)
    _, q, k = qkv_views(torch.float32, 0, True)
    qr, kr = enc.rotate(q, k, torch.arange(S), torch.arange(S))
    assert qr.grad_fn is kr.grad_fn
    assert qr.grad_fn.saved_tensors == ()


def test_q_and_k_of_one_projection_rotate_as_one_view():
    x, q, k = qkv_views(torch.float32, 0, True)
    rows = _qk_rows(q, k)
    assert rows is not None
    torch.testing.assert_close(rows, x.detach().view(B, S, 3, H, DH)[:, :, :2], rtol=0, atol=0)
    _, qc, kc = qkv_views(torch.float32, 0, False)  # own tensors: rotated one by one
    assert _qk_rows(qc, kc) is None
    assert _qk_rows(k, q) is None  # k before q in the row: not the layout the view assumes


def test_second_step_reuses_the_rotation_and_its_conjugate():
    enc = RoPE(DH)
    pos = torch.arange(S)
    enc._rotation_at(pos, None, torch.float32, H)  # builds the cos/sin table (a new version)
    first = enc._rotation_at(pos, None, torch.float32, H)
    second = enc._rotation_at(pos.clone(), None, torch.float32, H)
    assert len(first) == 5 and all(a is b for a, b in zip(first, second, strict=True))
    rot, rot_sh, conj, conj_sh, rot_qk = first
    torch.testing.assert_close(rot_qk, torch.stack((rot_sh, rot_sh), dim=-3))
    assert rot.shape == (1, S, DH // 2) and rot_sh.shape == (S, H, DH // 2)
    torch.testing.assert_close(rot_sh, rot.transpose(0, 1).expand(S, H, DH // 2))
    torch.testing.assert_close(conj, rot.conj().resolve_conj())
    torch.testing.assert_close(conj_sh, rot_sh.conj().resolve_conj())


def test_fast_rotation_under_attention_equals_the_reference():
    # SDPA's backward returns gradients in its own layout; the chain must still agree.
    enc = RoPE(DH, scaling={"type": "yarn", "factor": 2.0}, train_length=4)
    pos = torch.arange(S)

    def attend(rotate):
        x, q, k = qkv_views(torch.float32, 0, True)
        v = x.view(B, S, 3, H, DH).permute(2, 0, 3, 1, 4)[2]
        qr, kr = rotate(enc, q, k, pos, pos)
        out = torch.nn.functional.scaled_dot_product_attention(qr, kr, v, is_causal=True)
        out.pow(2).sum().backward()
        return out.detach(), x.grad

    for w, g in zip(attend(reference_rotate), attend(fast_rotate), strict=True):
        torch.testing.assert_close(g, w)


def test_bf16_keeps_the_real_form_path():
    enc = RoPE(DH)
    x, q, k = qkv_views(torch.bfloat16, 0, True)
    pos = torch.arange(S)
    assert len(enc._rotation_at(pos, None, torch.bfloat16, H)) == 1
    for w, g in zip(reference_rotate(enc, q, k, pos, pos), enc.rotate(q, k, pos, pos), strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_long_lengths_keep_no_per_head_copy_of_the_rotation():
    enc = RoPE(DH)
    enc.head_form_elements = S * H * DH // 2 - 1  # just below this length's per-head form
    rots = enc._rotation_at(torch.arange(S), None, torch.float32, H)
    assert rots[1].numel() == rots[3].numel() == rots[4].numel() == 0
    assert rots[0].shape == (1, S, DH // 2)
