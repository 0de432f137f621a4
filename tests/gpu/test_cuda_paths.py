"""The CUDA-only paths, run on a real GPU: flash SDPA, compiled FlexAttention forward and
backward, bf16 training steps with fused AdamW, and buffers on the GPU. Their CPU stand-ins
run in the default suite (tests/unit/model/test_attention_kernels.py, test_device_placement.py,
tests/unit/encodings/test_contract.py, tests/unit/runtime/test_precision.py)."""

from __future__ import annotations

import math
import re
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from posx.config.build import build_encoding, build_model
from posx.config.compose import CONFIG_DIR
from posx.encodings.base import NoPE
from posx.encodings.rope import RoPE
from posx.evaluation.memory import PeakMemory
from posx.kernels.bias import blocked_bias_attention
from posx.kernels.flex.attention import flex_bias_attention, flex_unsupported_reason
from posx.model.attention import causal_attention
from posx.runtime.precision import autocast_context, grad_scaler
from tests.conftest import composed

pytestmark = pytest.mark.cuda

CUDA = torch.device("cuda")
ENCODINGS = sorted(p.stem for p in (CONFIG_DIR / "encoding").glob("*.yaml"))
DIMS = ["model.d_model=64", "model.n_heads=4", "model.n_layers=2", "train.length=64"]
B, H, S, D = 2, 4, 128, 16


def model_of(name: str, *extra: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(composed([f"encoding={name}", *DIMS, *extra]), vocab_size=50).to(CUDA)


def reference_attention(q, k, v, bias=None):
    scores = q.float() @ k.float().transpose(-1, -2) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias
    future = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(-1) @ v.float()


@pytest.mark.parametrize("encoding", [NoPE(), RoPE(D)], ids=["nope", "rope"])
def test_flash_sdpa_takes_the_models_layout_in_bf16(encoding):
    encoding = encoding.to(CUDA)
    x = torch.randn(B, S, 3, H, D, device=CUDA, dtype=torch.bfloat16)
    q, k, v = x.permute(2, 0, 3, 1, 4)  # as the model makes them
    pos = torch.arange(S, device=CUDA)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):  # raises if flash cannot take these inputs
        out = causal_attention(q, k, v, pos, pos, encoding)
    qr, kr = encoding.rotate(q.float(), k.float(), pos, pos)
    expected = reference_attention(qr, kr, v)
    assert out.dtype == torch.bfloat16
    assert (out.float() - expected).norm() / expected.norm() < 2e-2


def _encoding(name: str):
    return build_encoding(composed([f"encoding={name}", *DIMS]))


# Bias encodings with a FlexAttention route (a bias table or their own score_mod); the encodings
# that compute attention themselves hand FlexAttention their scores instead (ATTEND_FLEX)
FLEX = [
    n
    for n in ENCODINGS
    if flex_unsupported_reason(_encoding(n)) is None and not _encoding(n).has_attend
]
ATTEND_FLEX = [n for n in ENCODINGS if _encoding(n).has_attend and _encoding(n).has_flex_scores]


@pytest.mark.parametrize("name", FLEX)
def test_compiled_flex_forward_and_backward_equal_blocked(name):
    torch.manual_seed(0)
    enc = build_encoding(composed([f"encoding={name}", *DIMS])).to(CUDA)
    with torch.no_grad():
        for p in enc.parameters():
            p.normal_(std=1.0)
    layer = enc.for_layer(1)
    pos = torch.stack([torch.arange(S), torch.arange(S) * 2 + 9]).to(CUDA)
    # FIRE's MLP score_mod has no compiled backward (score_mod_trains; training takes the
    # blocked kernel): its forward (the piecewise form) is compared, without gradients
    trains = layer.score_mod_trains or not layer.has_score_mod
    results = []
    for run in ("flex", "blocked"):
        gen = torch.Generator(device=CUDA).manual_seed(1)
        q, k, v = (
            torch.randn(B, H, S, D, device=CUDA, generator=gen).requires_grad_(trains)
            for _ in range(3)
        )
        enc.zero_grad(set_to_none=True)
        with torch.set_grad_enabled(trains):
            if run == "flex":  # alibi, FIRE: their own score_mod
                own = layer.score_mod(pos, pos) if layer.has_score_mod else None
                out = flex_bias_attention(q, k, v, pos, pos, layer.bias, score_mod=own)
            else:
                out = blocked_bias_attention(q, k, v, pos, pos, layer.bias, 32)
        if trains:
            (out * torch.linspace(-1, 1, D, device=CUDA)).sum().backward()
        grads = [q.grad, k.grad, v.grad] + [p.grad for p in enc.parameters()]
        results.append((out.detach(), grads))
    (flex_out, flex_grads), (blocked_out, blocked_grads) = results
    torch.testing.assert_close(flex_out, blocked_out, atol=2e-3, rtol=2e-3)
    for got, expected in zip(flex_grads, blocked_grads, strict=True):
        if expected is None:  # a parameter of another layer
            continue
        assert got is not None
        torch.testing.assert_close(got, expected, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("name", ENCODINGS)
def test_bf16_training_step_with_fused_adamw(name):
    """What ``posx train`` does on a GPU (attention_kernel=auto: FlexAttention for relative
    biases), with no fallback warning, against the same step in float32."""
    tokens = torch.randint(
        50, (B, 65), device=CUDA, generator=torch.Generator(device=CUDA).manual_seed(0)
    )
    losses = {}
    for precision in ("fp32", "bf16"):
        model = model_of(name).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        scaler = grad_scaler(CUDA, precision)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="FlexAttention failed")
            with autocast_context(CUDA, precision):
                logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
            scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        assert all(torch.isfinite(p).all() for p in model.parameters())
        losses[precision] = loss.detach().item()
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=2e-2)


@pytest.mark.parametrize("name", ENCODINGS)
def test_every_buffer_and_cache_is_on_the_gpu_after_a_forward(name):
    model = model_of(name).eval()
    with torch.no_grad():
        model(torch.randint(50, (B, 64), device=CUDA))
    stray = [n for n, b in model.named_buffers() if b.device.type != CUDA.type]
    assert not stray, stray


def test_fused_adamw_equals_foreach_on_the_gpu():
    params = []
    for fused in (True, False):
        model = model_of("alibi").train()
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=1e-2, fused=fused, foreach=None if fused else True
        )
        model(torch.arange(64, device=CUDA).remainder(50).unsqueeze(0)).sum().backward()
        optimizer.step()
        params.append([p.detach().clone() for p in model.parameters()])
    for a, b in zip(*params, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_peak_memory_reads_the_gpu_allocator():
    with PeakMemory(CUDA) as mem:
        block = torch.empty(64 * 2**20, dtype=torch.uint8, device=CUDA)  # 64 MiB
        del block
    assert 64 <= mem.delta_mb < 80


@pytest.mark.parametrize("name", ENCODINGS)
@pytest.mark.parametrize("s", [64, 300])
def test_every_encoding_evaluates_on_the_gpu_as_on_the_cpu(name, s):
    """Evaluation's kernels (fused SDPA with a float mask, compiled FlexAttention, the attend
    paths) at a training length and past it, ragged; Transformer-XL's once stopped here with
    "misaligned address" (posx/kernels/sdpa_mask.py)."""
    cpu = model_of(name).cpu().eval()
    gpu = model_of(name).eval()
    tokens = torch.randint(50, (2, s), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        try:
            expected = cpu(tokens)
        except ValueError as err:  # a table that ends (learned): the GPU must say the same
            with pytest.raises(ValueError, match=re.escape(str(err))):
                gpu(tokens.to(CUDA))
            return
        got = gpu(tokens.to(CUDA))
        with autocast_context(CUDA, "bf16"):
            half = gpu(tokens.to(CUDA))
    torch.testing.assert_close(got.cpu(), expected, atol=2e-3, rtol=2e-3)
    assert torch.isfinite(half).all()
    assert (half.float().cpu() - expected).norm() / expected.norm() < 5e-2


def test_the_causal_block_mask_at_32k_takes_no_quadratic_memory():
    from posx.kernels.flex.attention import causal_block_mask

    causal_block_mask.cache_clear()
    with PeakMemory(CUDA) as mem:
        causal_block_mask(32768, 32768, "cuda")
    assert mem.delta_mb < 64  # create_block_mask took 10 GiB here


@pytest.mark.parametrize("name", ["fire", "alibi"])
def test_evaluation_memory_at_32k_is_linear_in_the_length(name):
    """FIRE (its own score_mod) and alibi (a distance table) run in FlexAttention on CUDA: no
    [s, s] tensor. This model is small, so its peak is mostly activations, linear in the
    length (alibi: 47 MiB at 8k, 84 at 32k on an H200): the growth from 8k to 32k stays far
    under one head's [32k, 32k] bf16 scores (2 GiB), and grows no faster than linearly.
    (The GPT-2 shape's peak(32k) / peak(8k) <= 1.5 is `make bench-gpu`'s check: its weights
    dominate; a ratio here would judge this small model's activations.)"""
    model = model_of(name).eval()
    peaks = {}
    for s in (8192, 16384, 32768):
        tokens = torch.randint(50, (1, s), device=CUDA)
        with torch.inference_mode(), autocast_context(CUDA, "bf16"), PeakMemory(CUDA) as mem:
            model(tokens)
        peaks[s] = mem.peak_mb
    assert peaks[32768] - peaks[8192] < 128, peaks  # one [32k, 32k] bf16 head: 2,048 MiB
    # linear: the second doubling adds about twice the first (quadratic: four times)
    assert peaks[32768] - peaks[16384] <= 2.5 * (peaks[16384] - peaks[8192]) + 8, peaks


@pytest.mark.parametrize("name", ATTEND_FLEX)
def test_attend_encodings_flex_route_trains_as_attend_on_the_gpu(name):
    """shaw, deberta, transformer_xl with model.attention_kernel=flex (their flex_scores,
    compiled, forward and backward) equal their own attend route; no fallback warning."""
    tokens = torch.randint(50, (2, 96), generator=torch.Generator().manual_seed(0)).to(CUDA)
    results = []
    for kernel in ("flex", "auto"):
        model = model_of(name, f"model.attention_kernel={kernel}")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            logits = model(tokens)
            (logits.float() * torch.linspace(-1, 1, 50, device=CUDA)).sum().backward()
        assert not [w for w in caught if "attend" in str(w.message)], [
            str(w.message) for w in caught
        ]
        results.append((logits.detach(), [p.grad for p in model.parameters()]))
    (flex_out, flex_grads), (attend_out, attend_grads) = results
    torch.testing.assert_close(flex_out, attend_out, atol=2e-3, rtol=2e-3)
    for got, expected in zip(flex_grads, attend_grads, strict=True):
        if expected is not None:
            torch.testing.assert_close(got, expected, atol=5e-3, rtol=5e-3)


def test_cuda_query_blocks_come_from_the_devices_memory():
    """Issue 47: one budget from the real device's memory, uncapped by block_size, and the
    attend encodings' model output under it equals the CPU's blocks."""
    from posx.kernels.budget import block_budget

    budget = block_budget(CUDA)
    total = torch.cuda.get_device_properties(CUDA).total_memory
    assert budget.uncapped and budget.attend >= 2**22 and budget.attend * 16 <= total / 64
    tokens = torch.arange(300).remainder(50).unsqueeze(0)
    for name in ("shaw", "deberta", "cope", "transformer_xl"):
        model = model_of(name).eval()
        with torch.no_grad():
            got = model(tokens.to(CUDA)).float().cpu()
            expected = model.cpu()(tokens).float()
        torch.testing.assert_close(got, expected, atol=5e-3, rtol=5e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_rope_rotation_compiles_on_cuda_and_equals_the_eager_one(dtype):
    """Issue 47: RoPE.fused_rotation compiles (no fallback warning) and gives the eager
    rotation's outputs and gradients (bf16: within its rounding)."""
    from posx.kernels import rotary

    enc = RoPE(64, rotary_fraction=0.5).to(CUDA)
    pos = torch.arange(1000, device=CUDA)
    results = []
    for fused in (False, True):
        gen = torch.Generator(CUDA).manual_seed(0)
        x = torch.randn(2, 1000, 3 * 12 * 64, device=CUDA, generator=gen).to(dtype)
        x.requires_grad_()
        q, k, _ = x.view(2, 1000, 3, 12, 64).permute(2, 0, 3, 1, 4)
        enc.fused_rotation = fused
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            qr, kr = enc.rotate(q, k, pos, pos)
            (qr.float().square().sum() + kr.float().sum()).backward()
        assert not [w for w in caught if "fused RoPE" in str(w.message)]
        results.append((qr.float(), kr.float(), x.grad.float()))
    assert rotary.fused_available(CUDA)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for g, e in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(g, e, atol=tol, rtol=tol)
