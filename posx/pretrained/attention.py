"""posx's attention functions in ``transformers``: registered in its ``AttentionInterface``
(selected with a model's ``set_attn_implementation``, no model class patched), with the causal
mask SDPA takes (None for plain causal windows, a bool ``[b, 1, q, k]`` with padding)."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor


def register_attention(name: str, function: Callable) -> None:
    """Registers ``function`` as attention implementation ``name`` (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(name, function)
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


def repeat_heads(x: Tensor, heads: int) -> Tensor:
    """Grouped-query keys or values ``[b, h_kv, s, d]`` repeated to ``heads`` heads."""
    return x if x.shape[1] == heads else x.repeat_interleave(heads // x.shape[1], dim=1)
