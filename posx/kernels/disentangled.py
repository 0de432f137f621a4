"""Causal attention with two relative terms read by distance (DeBERTa's disentangled attention).

For queries and keys at consecutive positions (the same ``s`` tokens), the logit of query ``i``
and key ``j <= i`` is

    scale * (q_i . k_j  +  q_i . A_{i-j})  +  k_j . B_{i-j}

with ``A`` and ``B`` per-head tables indexed by the distance ``i - j`` (DeBERTa's c2p and p2c
terms; ``B`` carries its scale). Each term is a product with the ``s + 1`` distances of the table,
``[s, s + 1]`` per head and sequence, and its ``[s, s]`` pairs are a *contiguous* run of that
product's elements (the relative shift of Transformer-XL's code, with a width of ``s + 1``):
row ``i`` of ``q A^T`` at column ``s - 1 - (i - j)`` lies at flat offset ``s - 1 + i s + j``, and
row ``j`` of ``k B^T`` at column ``i - j`` at flat offset ``j s + i`` (so the p2c pairs are that
run transposed). Future pairs land on elements no causal pair reads, and the future mask hides
them; in the backward their gradient is exactly zero, so the gradient of either product is the
scores' gradient written into the same run, plus a few zeros at the ends: no gather, scatter or
zero-filled table.

:class:`DisentangledAttention` is that attention for one query block holding every query,
forward and backward by hand, as one autograd node (autograd's graph of the blocked
computation had about thirty nodes per layer, with strided copies and a zero fill per view).
The ``[h, b]`` order of its internals lets the tables, shared by the batch, enter one product
per head over every sequence. For several query blocks, :func:`shifted_terms` gives a block's
two terms (for :func:`posx.kernels.blocked.blocked_attend`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from posx.kernels.blocked import future_bias
from posx.kernels.relative import relative_shift_keys

# Keys per p2c product of :func:`shifted_terms` (at least the block's queries): a product of c
# keys spans c + bq - 1 distances, so larger chunks waste more, smaller ones make more calls.
# Measured when evaluation still took these terms as a fused kernel's mask (64-query blocks, at
# 16x, reference / posx, one thread): 64 against 128 keys, small 0.755 / 0.731, tiny 0.647 /
# 0.629 (0.527 / 0.516 at 4x).
P2C_KEY_CHUNK = 64

# (i0, i1, j0, out): adds a block's two relative terms (queries [i0, i1), keys [j0, i1)) to
# out [b, h, i1 - i0, i1 - j0]
AddTerms = Callable[[int, int, int, Tensor], None]


def _heads_first(x: Tensor) -> Tensor:
    """``[b, h, s, d] -> [h, b, s, d]``, contiguous."""
    return x.transpose(0, 1).contiguous()


def relative_logits(q_rows: Tensor, k_rows: Tensor, a: Tensor, b_: Tensor) -> Tensor:
    """The two relative terms of every pair plus the future mask (``-inf``), by the runs of the
    module docstring.

    Args:
        q_rows: Queries ``[h, b s, d]`` (``b`` sequences of ``s``), as they multiply ``a``.
        k_rows: Keys ``[h, b s, d]``.
        a: ``[h, s + 1, d]``, distances ``s - 1`` down to ``-1``.
        b_: ``[h, s + 1, d]``, distances ``0`` up to ``s``.

    Returns:
        A new ``[h b, s, s]`` (query-major, heads first).
    """
    h, bs, _ = q_rows.shape
    s = a.shape[1] - 1
    hb, width = h * bs // s, s * (s + 1)
    # c2p: [h, b s, s + 1]; its pairs are the run at offset s - 1 of each [s, s + 1] matrix
    c2p = torch.bmm(q_rows, a.transpose(1, 2))
    c2p_pairs = c2p.view(hb, width)[:, s - 1 : s - 1 + s * s].view(hb, s, s)
    # c2p and the future mask in one pass (a float mask: masked_fill_ with a broadcast boolean
    # mask took 10x as long)
    logits = torch.add(c2p_pairs, future_bias(0, s, a.device).to(a.dtype))
    # p2c into the c2p product's memory (read already): a fresh 2 MB tensor costs its page
    # faults on first touch, as much as the product itself at the tiny model's shapes
    p2c = torch.bmm(k_rows, b_.transpose(1, 2), out=c2p)  # [h, b s, s + 1]
    return logits.add_(p2c.view(hb, width)[:, : s * s].view(hb, s, s).transpose(1, 2))


class DisentangledAttention(torch.autograd.Function):
    """Causal softmax attention with content, query-by-distance and key-by-distance logits.

    Forward arguments: ``q``, ``k``, ``v`` ``[b, h, s, d]``; ``a`` ``[h, s + 1, d]``, the
    query-side table at distances ``s - 1`` down to ``-1`` (row ``s - 1 - (i - j)``); ``b_``
    ``[h, s + 1, d]``, the key-side table, scaled, at distances ``0`` up to ``s`` (row
    ``i - j``); ``scale``, of the query's products. Returns ``[b, h, s, d]``.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, q: Tensor, k: Tensor, v: Tensor, a: Tensor, b_: Tensor, scale: float
    ) -> Tensor:
        b, h, s, d = q.shape
        hb = h * b
        q_s = torch.empty(h, b, s, d, dtype=q.dtype, device=q.device)
        torch.mul(q.transpose(0, 1), scale, out=q_s)  # the layout and the scale in one pass
        k_h, v_h = _heads_first(k), _heads_first(v)
        logits = relative_logits(q_s.view(h, b * s, d), k_h.view(h, b * s, d), a, b_)
        logits.baddbmm_(q_s.view(hb, s, d), k_h.view(hb, s, d).transpose(1, 2))
        probs = torch.softmax(logits, dim=-1, out=logits)  # row by row: in place is exact
        out = torch.bmm(probs, v_h.view(hb, s, d))  # [h b, s, d]
        ctx.save_for_backward(q_s, k_h, v_h, a, b_, probs, out)
        ctx.scale = scale
        return out.view(h, b, s, d).transpose(0, 1)

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        q_s, k_h, v_h, a, b_, probs, out = ctx.saved_tensors
        h, b, s, d = q_s.shape
        hb, width = h * b, s * (s + 1)
        g = _heads_first(grad_out).view(hb, s, d)
        grad_v = torch.bmm(probs.transpose(1, 2), g)
        # The probabilities' gradient, in memory that then holds the p2c product's gradient
        grad_p2c = torch.empty(hb, width, dtype=q_s.dtype, device=q_s.device)
        grad_p = grad_p2c.view(-1)[: hb * s * s].view(hb, s, s)  # contiguous: bmm writes it
        torch.bmm(g, v_h.view(hb, s, d).transpose(1, 2), out=grad_p)
        row_dot = (g * out).sum(-1, keepdim=True)  # sum_j p_ij dp_ij
        # The logits' gradient written straight into the c2p product's layout (module doc).
        grad_c2p = torch.empty(hb, width, dtype=q_s.dtype, device=q_s.device)
        grad_c2p[:, : s - 1].zero_()
        grad_c2p[:, s - 1 + s * s :].zero_()
        grad_logits = grad_c2p[:, s - 1 : s - 1 + s * s].view(hb, s, s)
        torch.sub(grad_p, row_dot, out=grad_logits)
        grad_logits.mul_(probs)  # masked pairs: probability 0, gradient exactly 0
        # and transposed into the p2c product's
        grad_p2c[:, s * s :].zero_()
        grad_keys = grad_p2c[:, : s * s].view(hb, s, s)
        grad_keys.copy_(grad_logits.transpose(1, 2))
        grad_c2p_h = grad_c2p.view(h, b * s, s + 1)
        grad_p2c_h = grad_p2c.view(h, b * s, s + 1)
        grad_q = torch.bmm(grad_logits, k_h.view(hb, s, d))
        grad_q.view(h, b * s, d).baddbmm_(grad_c2p_h, a)
        grad_q.mul_(ctx.scale)
        grad_k = torch.bmm(grad_keys, q_s.view(hb, s, d))
        grad_k.view(h, b * s, d).baddbmm_(grad_p2c_h, b_)
        grad_a = torch.bmm(grad_c2p_h.transpose(1, 2), q_s.view(h, b * s, d))
        grad_b = torch.bmm(grad_p2c_h.transpose(1, 2), k_h.view(h, b * s, d))

        def back(x: Tensor) -> Tensor:
            return x.view(h, b, s, d).transpose(0, 1)

        return back(grad_q), back(grad_k), back(grad_v), grad_a, grad_b, None


def shifted_terms(q: Tensor, k: Tensor, a_t: Tensor, b_t: Tensor) -> AddTerms:
    """The two relative terms of any query block at consecutive positions, from tables laid out
    by distance once (``q_i . A_{i-j}`` and ``k_j . B_{i-j}``, the blocked form of the
    module's logits, for blocks that leave out keys before ``j0``).

    c2p is one product of the block's queries with the ``keys + 1`` distances from its farthest
    pair down to ``-1``, its pairs a run of that product (module docstring, with ``keys`` for
    ``s``); p2c one key-major product per chunk of up to :data:`P2C_KEY_CHUNK` keys (a chunk of
    ``c`` keys spans ``c + bq - 1`` distances), read through :func:`relative_shift_keys`. No
    term or gradient needs a gather, a scatter or a zero-filled ``[block, 2k]`` table.

    Args:
        q: Queries ``[b, h, s, d]`` as they multiply ``A``.
        k: Keys ``[b, h, s, d]``.
        a_t: ``[h, d, 2s]``: ``A`` at distances ``s - 1`` down to ``-s``.
        b_t: ``[h, d, 2s - 1]``: ``B`` at distances ``1 - s`` up to ``s - 1``.

    Returns:
        The function that adds a block's terms (see :data:`AddTerms`).
    """
    s = k.shape[-2]

    def add_terms(i0: int, i1: int, j0: int, out: Tensor) -> None:
        bq, keys = i1 - i0, i1 - j0
        c2p = q[..., i0:i1, :] @ a_t[..., s - keys : s + 1]  # [b, h, bq, keys + 1]
        c2p = c2p.flatten(-2)[..., bq - 1 : bq - 1 + bq * keys].unflatten(-1, (bq, keys))
        out.add_(c2p)
        chunk = max(bq, P2C_KEY_CHUNK)
        for c0 in range(0, keys, chunk):
            c1 = min(keys, c0 + chunk)
            cols = b_t[..., s + i0 - j0 - c1 : s + i1 - 1 - j0 - c0]
            p2c = k[..., j0 + c0 : j0 + c1, :] @ cols  # [b, h, c1 - c0, c1 - c0 + bq - 1]
            out[..., c0:c1].add_(relative_shift_keys(p2c, bq))

    return add_terms
