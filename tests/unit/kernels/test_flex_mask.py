"""The causal FlexAttention block mask, built from its tiles' bounds.

``create_block_mask`` evaluates the mask on every (query, key) pair before it makes the tiles:
about 10 bytes a pair, 10 GiB at 32k tokens on an H200 (2026-11-26), where evaluation's memory
should grow linearly. posx's mask must be the one ``create_block_mask`` makes, tile for tile,
without that pass.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from posx.kernels.flex.attention import FLEX_AVAILABLE, _causal, causal_block_mask

pytestmark = pytest.mark.skipif(not FLEX_AVAILABLE, reason="this torch has no FlexAttention")

SIZES = [1, 5, 127, 128, 129, 256, 300, 1000]


def torch_mask(sq: int, sk: int):
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(_causal, None, None, sq, sk, device="cpu")


def used(counts: torch.Tensor, indices: torch.Tensor) -> list[list[int]]:
    """Each row's tiles as a sorted list (the order within a row is free)."""
    return [sorted(indices[0, 0, r, : int(n)].tolist()) for r, n in enumerate(counts[0, 0])]


@pytest.mark.parametrize("sq", SIZES)
@pytest.mark.parametrize("sk", [1, 128, 129, 300, 1000])
def test_the_mask_is_create_block_masks_tile_for_tile(sq, sk):
    ours, theirs = causal_block_mask(sq, sk, "cpu"), torch_mask(sq, sk)
    assert ours.shape == theirs.shape
    assert used(ours.kv_num_blocks, ours.kv_indices) == used(
        theirs.kv_num_blocks, theirs.kv_indices
    )
    assert used(ours.full_kv_num_blocks, ours.full_kv_indices) == used(
        theirs.full_kv_num_blocks, theirs.full_kv_indices
    )
    # the query-major copy FlexAttention's backward reads
    assert used(ours.q_num_blocks, ours.q_indices) == used(theirs.q_num_blocks, theirs.q_indices)
    assert torch.equal(ours.to_dense(), theirs.to_dense())


@pytest.mark.parametrize("s", [100, 300])
def test_attention_under_the_mask_is_causal_attention(s):
    from torch.nn.attention.flex_attention import flex_attention

    q, k, v = torch.randn(3, 2, 3, s, 8).unbind(0)
    with warnings.catch_warnings():  # "without torch.compile": the unfused reference, wanted
        warnings.simplefilter("ignore")
        out = flex_attention(q, k, v, block_mask=causal_block_mask(s, s, "cpu"))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(sys.platform != "linux", reason="address-space limit checked on Linux")
def test_the_mask_at_32k_tokens_fits_in_little_memory():
    # create_block_mask asks for 8 GiB here; the tiles need kilobytes. 3 GiB of address space
    # is what importing torch and this module takes, with room to spare.
    limit = 3 * 2**30
    code = textwrap.dedent(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
        from posx.kernels.flex.attention import causal_block_mask
        mask = causal_block_mask(32768, 32768, "cpu")
        print(int(mask.kv_num_blocks.sum()), int(mask.full_kv_num_blocks.sum()))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    tiles = 32768 // 128
    assert done.stdout.split() == [str(tiles), str(tiles * (tiles - 1) // 2)]


def test_compiled_flex_keeps_compiling_past_dynamo_s_default_limit(monkeypatch):
    """Each length (and kind of score_mod) is its own compiled kernel. Past dynamo's default
    of 8 per function torch runs FlexAttention unfused, building every [b, h, s, s] score, with
    no error: a sweep over many lengths on CUDA would turn quadratic in memory. posx's compiled
    call raises the limit for its own calls (and leaves the global setting alone)."""
    from posx.kernels.flex import attention as flex

    seen = []

    def fake_compile(fn, **kwargs):
        return lambda *a, **k: seen.append(torch._dynamo.config.recompile_limit)

    monkeypatch.setattr(torch, "compile", fake_compile)
    flex._compiled_flex.cache_clear()
    try:
        default = torch._dynamo.config.recompile_limit
        flex._compiled_flex()(None)
    finally:
        flex._compiled_flex.cache_clear()
    assert seen == [max(default, flex.FLEX_RECOMPILES)] and seen[0] >= 64
    assert torch._dynamo.config.recompile_limit == default
