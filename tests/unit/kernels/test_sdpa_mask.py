"""The mask SDPA receives is laid out as CUDA's memory-efficient kernel reads it.

On an H200, Transformer-XL's evaluation handed SDPA a diagonal view of its position term (row
stride ``2s - 2``): "CUDA error: misaligned address", sticky for the rest of the process. The
layout rule is checked here on the CPU by running the CUDA branch (``aligned_rows``) in place of
the CPU's pass-through.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from posx.config.build import build_model
from posx.config.compose import compose
from posx.kernels import bias as bias_kernel
from posx.kernels import blocked
from posx.kernels.sdpa_mask import ROW_MULTIPLE, aligned_rows, sdpa_mask


def is_aligned(mask: torch.Tensor) -> bool:
    return (
        mask.stride(-1) == 1
        and all(s % ROW_MULTIPLE == 0 for s in mask.stride()[:-1])
        and mask.data_ptr() % (ROW_MULTIPLE * mask.element_size()) == 0
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("keys", [1, 63, 64, 100])
def test_a_strided_view_is_copied_into_aligned_rows(dtype, keys):
    base = torch.randn(2 * 3 * keys * (keys + 7) + 5, dtype=dtype)
    view = base[5:].as_strided(
        (2, 3, keys, keys), (3 * keys * (keys + 7), keys * (keys + 7), keys + 7, 1)
    )
    assert not is_aligned(view)
    out = aligned_rows(view)
    assert is_aligned(out)
    assert torch.equal(out, view)


def test_an_aligned_mask_is_passed_as_it_is():
    mask = torch.randn(2, 3, 10, 32)
    assert aligned_rows(mask) is mask
    broadcast = torch.randn(1, 3, 10, 32).expand(4, 3, 10, 32)  # stride 0 is aligned
    assert aligned_rows(broadcast) is broadcast


def test_off_cuda_the_mask_is_not_copied():
    view = torch.randn(4, 100)[:, 1:65].unsqueeze(0).unsqueeze(0)
    assert sdpa_mask(view) is view


@pytest.fixture
def masks_as_on_cuda(monkeypatch):
    """Every mask the kernels hand SDPA, with the CUDA branch of ``sdpa_mask`` in force."""
    seen: list[torch.Tensor] = []
    sdpa = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, **kwargs):
        if attn_mask is not None:
            seen.append(attn_mask)
        return sdpa(q, k, v, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(blocked, "sdpa_mask", aligned_rows)
    monkeypatch.setattr(bias_kernel, "sdpa_mask", aligned_rows)
    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    return seen


@pytest.mark.parametrize(
    "overrides",
    [
        ["encoding=transformer_xl"],  # blocked_bias_sdpa, the path that failed on the H200
        ["encoding=alibi", "model.attention_kernel=blocked"],  # per-distance table blocks
        ["encoding=t5", "model.attention_kernel=blocked"],
    ],
    ids=["transformer_xl", "alibi-blocked", "t5-blocked"],
)
@pytest.mark.parametrize("s", [64, 100, 300])
def test_every_mask_sdpa_gets_is_aligned_and_the_output_unchanged(masks_as_on_cuda, overrides, s):
    torch.manual_seed(0)
    model = build_model(compose([*overrides, "model.n_layers=2", "model.attn_block_size=64"]), 50)
    tokens = torch.randint(50, (2, s))
    with torch.no_grad():
        model(tokens)
    assert masks_as_on_cuda, "no mask reached SDPA: the path under test did not run"
    assert all(is_aligned(m) for m in masks_as_on_cuda)


@pytest.mark.parametrize("s", [64, 300])
def test_aligning_the_masks_changes_no_output(monkeypatch, s):
    torch.manual_seed(0)
    model = build_model(compose(["encoding=transformer_xl", "model.n_layers=2"]), 50)
    tokens = torch.randint(50, (2, s))
    with torch.no_grad():
        plain = model(tokens)
        monkeypatch.setattr(blocked, "sdpa_mask", aligned_rows)
        aligned = model(tokens)
    torch.testing.assert_close(aligned, plain, atol=1e-5, rtol=1e-5)
