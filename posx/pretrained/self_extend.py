"""Self-Extend (Jin et al. 2024) on a ``transformers`` model, through its attention interface.

The attention function is registered in ``transformers``' ``AttentionInterface`` (and the
causal mask it needs in ``AttentionMaskInterface``) under :data:`IMPLEMENTATION`, and a model is
switched to it with ``set_attn_implementation``: no model class is patched, so every family
whose attention goes through the interface (Llama, Qwen2, Mistral, ...) takes it.

The model's attention hands the function queries and keys already rotated at their own
positions. Rotations compose (``R(a) R(b) = R(a + b)``), so the grouped queries and keys are
those rotated once more, by ``gq(i) - i`` and ``gk(j) - j``
(:mod:`posx.kernels.self_extend`), with the model's own inverse frequencies and its
half-and-half pairing (``rotate_half``). The group size and window ride on the model's config
(:data:`CONFIG_KEY`), read by every layer.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from posx.kernels.self_extend import (
    grouped_key_positions,
    grouped_query_positions,
    self_extend_attend,
)
from posx.pretrained.attention import register_attention, repeat_heads

IMPLEMENTATION = "posx_selfextend"
CONFIG_KEY = "posx_self_extend"
# RoPE types whose frequencies depend on the sequence's length: the re-rotation would use
# other frequencies than the model's forward did.
LENGTH_DEPENDENT = ("dynamic", "longrope")
# Queries per block of the merged attention (fewer at long lengths: memory linear in s).
BLOCK_SIZE = 256


def register() -> None:
    """Registers the attention function and its mask with ``transformers`` (idempotent)."""
    register_attention(IMPLEMENTATION, self_extend_attention)


def unsupported_reason(model: torch.nn.Module, rope_type: str | None) -> str:
    """Why Self-Extend cannot run on ``model`` (``""`` when it can).

    Args:
        model: The loaded causal LM.
        rope_type: Its saved ``rope_parameters["rope_type"]`` (None: no RoPE).
    """
    kind = model.config.model_type
    if rope_type is None:
        return (
            f"{kind} has no rotary positions for Self-Extend to group (its positions are not RoPE)"
        )
    if rope_type in LENGTH_DEPENDENT:
        return (
            f"Self-Extend needs fixed RoPE frequencies; {kind}'s rope_type {rope_type!r} "
            "changes them with the length"
        )
    can = getattr(model, "_can_set_attn_implementation", None)
    if can is None or not can():
        return f"{kind} does not compute attention through transformers' attention interface"
    return ""


def enable(model: torch.nn.Module, group: int, window: int, inv_freq: Tensor) -> None:
    """Switches ``model`` to Self-Extend with group size ``group`` and window ``window``.

    Args:
        model: The loaded causal LM (see :func:`unsupported_reason`).
        group: Group size ``G``.
        window: Neighbour window ``W``.
        inv_freq: The model's rotary inverse frequencies ``[r/2]``.
    """
    register()
    setattr(
        model.config,
        CONFIG_KEY,
        {"group": int(group), "window": int(window), "inv_freq": inv_freq.double().tolist()},
    )
    model.set_attn_implementation(IMPLEMENTATION)


def disable(model: torch.nn.Module, implementation: str) -> None:
    """Puts ``model`` back on ``implementation`` (its attention before :func:`enable`)."""
    if hasattr(model.config, CONFIG_KEY):
        delattr(model.config, CONFIG_KEY)
    if model.config._attn_implementation != implementation:
        model.set_attn_implementation(implementation)


def _rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rerotate(x: Tensor, delta: Tensor, inv_freq: Tensor) -> Tensor:
    """``x`` rotated (half-and-half pairing) by ``delta`` more positions.

    Args:
        x: Rotated queries or keys ``[b, h, s, d]`` (the first ``2 len(inv_freq)`` dims rotate).
        delta: Positions to add, ``[s]`` or ``[b, s]``.
        inv_freq: ``[r/2]`` float32.

    Returns:
        ``[b, h, s, d]`` in ``x``'s dtype.
    """
    rot = 2 * inv_freq.shape[0]
    angles = delta.to(torch.float32).unsqueeze(-1) * inv_freq  # [(b,) s, r/2]
    emb = torch.cat((angles, angles), dim=-1).unsqueeze(-3)  # [(b,) 1, s, r]
    part = x[..., :rot].float()
    turned = (part * emb.cos() + _rotate_half(part) * emb.sin()).to(x.dtype)
    return turned if rot == x.shape[-1] else torch.cat((turned, x[..., rot:]), dim=-1)


def self_extend_attention(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """The attention function ``transformers`` calls in each layer (its interface's signature).

    Args:
        module: The attention layer (its ``config`` carries :data:`CONFIG_KEY`).
        query: Queries ``[b, h, s, d]``, rotated at their positions.
        key: Keys ``[b, h_kv, sk, d]``, rotated: ``sk = s`` for a whole window, more with a
            KV cache (every position so far; the queries are the last ``s``).
        value: Values ``[b, h_kv, sk, d]``.
        attention_mask: None (causal) or a bool ``[b, 1, s, sk]`` (True = visible).
        scaling: Logit scale (default ``1 / sqrt(d)``).
        dropout: Ignored: Self-Extend is an evaluation-time method.
        **kwargs: ``position_ids`` ``[b, s]`` of the queries (default the last ``s`` of
            ``0..sk-1``).

    Returns:
        The output ``[b, s, h, d]`` and no attention weights.

    Raises:
        ValueError: Fewer keys than queries (no cache posx knows keeps such keys).
    """
    settings = getattr(module.config, CONFIG_KEY)
    group, window = settings["group"], settings["window"]
    b, heads, s, _ = query.shape
    sk = key.shape[-2]
    if sk < s:
        raise ValueError(f"Self-Extend: {s} queries against {sk} keys (fewer keys than queries)")
    pos = kwargs.get("position_ids")
    pos = torch.arange(sk - s, sk, device=query.device) if pos is None else pos.to(query.device)
    if pos.dim() == 2 and bool((pos == pos[:1]).all()):
        pos = pos[0]  # one row shared by the batch
    inv_freq = torch.tensor(settings["inv_freq"], dtype=torch.float32, device=query.device)
    key, value = repeat_heads(key, heads), repeat_heads(value, heads)
    if attention_mask is not None and attention_mask.dtype == torch.bool:
        # A left-padding query sees no key at all, and its row of NaNs would reach every real
        # token through the next layer's values (0 x NaN): each query also sees itself, which
        # changes nothing for a real token (causal attention sees its own key already).
        own = torch.arange(sk, device=query.device) == torch.arange(
            sk - s, sk, device=query.device
        ).unsqueeze(-1)
        attention_mask = attention_mask | own
    # With a KV cache the keys are every position so far and the queries the last ``s`` of
    # them; positions run on by one per token from each row's first real one (left padding
    # sits before it, masked), so a key's position is counted back from the last query's.
    k_pos = pos if sk == s else pos[..., -1:] + torch.arange(1 - sk, 1, device=pos.device)
    q_grp = rerotate(query, grouped_query_positions(pos, group, window) - pos, inv_freq)
    k_grp = rerotate(key, grouped_key_positions(k_pos, group) - k_pos, inv_freq)
    out = self_extend_attend(
        (query, key), (q_grp, k_grp), value, (pos, k_pos), window, BLOCK_SIZE,
        mask=attention_mask, scale=scaling,
    )  # fmt: skip
    return out.transpose(1, 2).contiguous(), None
