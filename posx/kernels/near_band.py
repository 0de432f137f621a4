"""Causal attention whose relative terms stop changing a fixed number of keys back, without a
gradient: the far keys in one fused causal call, the near band as a few small products.

At consecutive positions (distance = query index - key index) an encoding with a clipping
distance ``n`` (Shaw's ``a^K``, ``a^V``) scores every key at least ``n`` back like a plain
attention plus a per-query constant, and adds one constant vector to its value. Those keys,
``[0, i - n]`` for query ``i``, are exactly a causal attention of queries ``[n, s)`` over keys
``[0, s - n)``: one call of the CPU's fused flash kernel (``is_causal``), which also returns the
log-sum-exp. The ``n`` nearest keys of every query are scored here as a ``[b, h, s, n]`` band
(one batched product per chunk of ``c`` queries against the ``c + n - 1`` keys they reach, read
along its diagonals), and the two parts are merged exactly by their log-sum-exps. Nothing of size
``s x s`` exists, no mask is read, and the fused kernel skips the causal triangle: the cost is a
plain causal attention plus ``O(s n d_h)``.

The per-query constant of the far keys cancels in the softmax, so the band is scored relative to
it (``near_keys - far_key``), and the far value is added once, weighted by the probabilities'
total of 1 (``near_values - far_value`` for the band).

Without a gradient only (the kernel's log-sum-exp has none) and on the CPU; callers check
:func:`~posx.kernels.blocked.fused_lse_available` and
:func:`~posx.kernels.relative.consecutive_positions`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posx.kernels.flash import flash_lse

# Queries per chunk of the band products: a chunk multiplies its ``c`` queries by the
# ``c + n - 1`` keys they reach, of which each query uses ``n`` (with n = 16, half the columns).
BAND_CHUNK = 16
# Most elements of one segment's band ``[b, h, queries, c + n - 1]``: its temporaries stay in
# cache and their memory flat at long lengths.
SEGMENT_ELEMENTS = 2**19


def near_band_attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scale: float,
    near_keys: Tensor,
    near_values: Tensor | None = None,
    far_key: Tensor | None = None,
    far_value: Tensor | None = None,
) -> Tensor:
    """Causal attention at consecutive positions with relative vectors constant from ``n`` back.

    The logit of query ``i`` and key ``j <= i`` is ``scale * q_i . (k_j + a_ij)`` and the value
    ``v_j + b_ij``, where ``a_ij = near_keys[n - 1 - (i - j)]`` and
    ``b_ij = near_values[n - 1 - (i - j)]`` when ``i - j < n``, else ``far_key``, ``far_value``.

    Args:
        q: Queries ``[b, h, s, d_h]``.
        k: Keys ``[b, h, s, d_h]``.
        v: Values ``[b, h, s, d_h]``.
        scale: Logit scale.
        near_keys: ``[n, d_h]``: row ``m`` for distance ``n - 1 - m`` (keys in increasing
            order); ``n >= 1``.
        near_values: ``[n, d_h]``, same rows, added to the values (``None``: 0).
        far_key: ``[d_h]`` for every distance ``n`` or more (``None``: 0).
        far_value: ``[d_h]`` added to those keys' values (``None``: 0).

    Returns:
        ``[b, h, s, d_h]`` in ``v``'s dtype.
    """
    b, h, s, d_h = q.shape
    n, dtype, c = near_keys.shape[0], v.dtype, BAND_CHUNK
    # query i >= n also sees keys [0, i - n]: a causal attention of q[n:] over k[:s - n]
    far_out = far_lse = None
    if s > n:
        far_out, far_lse = flash_lse(
            q[..., n:, :], k[..., : s - n, :], v[..., : s - n, :], scale, causal=True
        )
    near_keys = near_keys.float() - (0 if far_key is None else far_key.float())
    if near_values is not None or far_value is not None:
        zero = torch.zeros(d_h, device=q.device)
        far_v = zero if far_value is None else far_value.float()
        near_v = (zero if near_values is None else near_values.float()) - far_v
    chunks = -(-s // c)
    qs = _padded(q, chunks * c, scale)  # [b, h, chunks * c, d_h]
    keys, values = _windows(k, chunks, n), _windows(v, chunks, n)
    per = max(1, SEGMENT_ELEMENTS // (b * h * c * (c + n - 1)))  # chunks per segment
    outputs = []
    for t0 in range(0, chunks, per):
        t1 = min(chunks, t0 + per)
        i0, i1 = t0 * c, min(s, t1 * c)
        rows = qs[..., i0 : t1 * c, :].unflatten(-2, (t1 - t0, c))
        band = rows @ keys[:, :, t0:t1].transpose(-1, -2)  # [b, h, t1 - t0, c, c + n - 1]
        # the band's diagonals, in a tensor of their own: a softmax over the strided view ran
        # its reductions and exp several times slower
        logits = torch.add(_diagonals(band, n), rows @ near_keys.T)  # [b, h, t1 - t0, c, n]
        if i0 < n - 1:  # the first queries' band reaches before key 0
            _before_start_(logits, n, i0)
        f0 = min(max(i0, n), i1)  # first query of the segment with far keys
        lse = None if far_lse is None else far_lse[..., f0 - n : i1 - n]
        far_weight = _softmax_(logits, lse, f0 - i0, i1 - i0)
        band.zero_()
        _diagonals(band, n).copy_(logits)
        out = band @ values[:, :, t0:t1]  # [b, h, t1 - t0, c, d_h]
        if near_values is not None or far_value is not None:
            # sum_m p_m (v + b_m) + w_far (far_out + b_far) = that with b - b_far, + b_far
            out += (logits @ near_v).add_(far_v)
        out = out.flatten(-3, -2)[..., : i1 - i0, :]
        if far_weight is not None:
            far = far_out[..., f0 - n : i1 - n, :].float()
            out[..., f0 - i0 :, :].addcmul_(far_weight.unsqueeze(-1), far)
        outputs.append(out)
    out = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-2)
    return out.to(dtype)


def _padded(x: Tensor, rows: int, scale: float) -> Tensor:
    """``scale * x`` (float32) in a new ``[b, h, rows, d]`` tensor, zero after ``x``'s rows."""
    b, h, s, d = x.shape
    out = torch.empty(b, h, rows, d, device=x.device)
    torch.mul(x, scale, out=out[..., :s, :])
    out[..., s:, :] = 0
    return out


def _windows(x: Tensor, chunks: int, n: int) -> Tensor:
    """Overlapping views ``[b, h, chunks, c + n - 1, d]`` of ``x [b, h, s, d]`` (float32):
    window ``t`` holds rows ``t c - n + 1`` up to ``t c + c - 1``.

    One copy of ``x``, heads end to end in rows of ``chunks * c`` (zero after ``s``) behind
    ``n - 1`` zero rows, serves every window as a strided view: the rows a head's first window
    reads before its row 0 are the previous head's last ones (finite, and masked out), so the
    batched products read it in place.
    """
    b, h, s, d = x.shape
    c, length = BAND_CHUNK, chunks * BAND_CHUNK
    flat = torch.zeros(n - 1 + b * h * length, d, device=x.device)
    flat[n - 1 :].view(b, h, length, d)[..., :s, :] = x
    size = (b, h, chunks, c + n - 1, d)
    return flat.as_strided(size, (h * length * d, length * d, c * d, d, 1))


def _diagonals(band: Tensor, n: int) -> Tensor:
    """Columns ``r .. r + n - 1`` of row ``r`` of every chunk ``[.., c, c + n - 1]`` (a view
    ``[.., c, n]``: column ``m`` is key ``r - n + 1 + m`` of the chunk's queries)."""
    stride = (*band.stride()[:-2], band.stride(-2) + 1, 1)
    return band.as_strided((*band.shape[:-1], n), stride, band.storage_offset())


def _before_start_(logits: Tensor, n: int, i0: int) -> None:
    """Sets to ``-inf``, in place, the band entries that lie before key 0 for the segment's
    queries from ``i0`` on (``logits [b, h, chunks, c, n]``; column ``m`` of query ``i`` is key
    ``i - n + 1 + m``)."""
    c = logits.shape[-2]
    first = min(logits.shape[-3], -(-(n - 1 - i0) // c))  # chunks with such entries
    query = i0 + torch.arange(first * c, device=logits.device).unsqueeze(-1)
    key = query - n + 1 + torch.arange(n, device=logits.device)
    before = torch.zeros(key.shape, device=logits.device).masked_fill_(key < 0, float("-inf"))
    logits[..., :first, :, :] += before.view(first, c, n)


def _softmax_(logits: Tensor, far_lse: Tensor | None, f: int, e: int) -> Tensor | None:
    """Softmax of the band ``[b, h, chunks, c, n]`` (query ``t c + r`` at ``[.., t, r, :]``),
    in place, jointly for queries ``[f, e)`` with a far part of log-sum-exp
    ``far_lse [b, h, e - f]``; returns the far part's weight ``[b, h, e - f]`` (``None``
    without one)."""
    peak = logits.amax(dim=-1)  # [b, h, chunks, c]
    by_query = peak.view(*peak.shape[:-2], -1)[..., f:e]
    if far_lse is not None:
        torch.maximum(by_query, far_lse, out=by_query)
    probs = logits.sub_(peak.unsqueeze(-1)).exp_()
    total = probs.sum(dim=-1)
    far_weight = None
    if far_lse is not None:
        far_weight = (far_lse - by_query).exp_()
        total_far = total.view(*total.shape[:-2], -1)[..., f:e]
        total_far += far_weight
        far_weight /= total_far
    probs /= total.unsqueeze(-1)
    return far_weight
