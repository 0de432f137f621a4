"""The CPU's fused flash-attention kernel with its log-sum-exp, and merging by log-sum-exps.

Several kernels split a query's keys into parts (far keys that share one relative term, a near
band computed explicitly) and take the plain parts through the flash kernel: it returns the
log-sum-exp ``[b, h, sq]`` with the output, so the parts' outputs combine exactly
(:func:`merge_by_lse`). PyTorch exposes that kernel as an ATen op on the CPU only, and its
log-sum-exp has no gradient: callers use it in evaluation.
"""

from __future__ import annotations

import torch
from torch import Tensor


def flash_available(device: torch.device) -> bool:
    """Whether :func:`flash_lse` can run on ``device`` (the CPU, with this torch's op)."""
    return device.type == "cpu" and hasattr(
        torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu"
    )


def flash_lse(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scale: float,
    mask: Tensor | None = None,
    causal: bool = False,
) -> tuple[Tensor, Tensor]:
    """Attention ``softmax(scale q k^T + mask) v`` and its log-sum-exp, fused.

    Args:
        q: Queries ``[b, h, sq, d_h]``.
        k: Keys ``[b, h, sk, d_h]``.
        v: Values ``[b, h, sk, d_h]``.
        scale: Factor of ``q . k``.
        mask: Float mask added to the logits ``[b, h, sq, sk]`` (``None``: none).
        causal: Query ``i`` sees keys ``[0, i]`` only.

    Returns:
        ``(out [b, h, sq, d_h], lse [b, h, sq])``.
    """
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, is_causal=causal, attn_mask=mask, scale=scale
    )


def merge_by_lse(a: Tensor, a_lse: Tensor, b: Tensor, b_lse: Tensor) -> Tensor:
    """Softmax-weighted union of two disjoint key sets' attention outputs, by log-sum-exps."""
    total = torch.logaddexp(a_lse, b_lse)
    return a * (a_lse - total).exp().unsqueeze(-1) + b * (b_lse - total).exp().unsqueeze(-1)
