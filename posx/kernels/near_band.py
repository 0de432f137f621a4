"""Causal attention whose relative terms stop changing a fixed number of keys back, without a
gradient: the far keys in one fused causal call, the near band in chunks.

At consecutive positions (distance = query index - key index) an encoding whose terms saturate
at a distance ``n`` (Shaw's clipped ``a^K``, ``a^V``; DeBERTa's c2p and p2c) scores every key at
least ``n`` back like a plain attention plus a per-query constant, and adds one constant vector
to its value. Those keys, ``[0, i - n]`` for query ``i``, are exactly a causal attention of
queries ``[n, s)`` over keys ``[0, s - n)``: one call of the CPU's fused flash kernel
(``is_causal``), which also returns the log-sum-exp. The ``n`` nearest keys of every query form
a band, taken in chunks of ``c`` queries against the ``c + n - 1`` keys they reach (overlapping
windows of one padded copy of the keys, read along their diagonals), and the two parts are
merged exactly by their log-sum-exps. Nothing of size ``s x s`` exists: the cost is a plain
causal attention plus ``O(s n d_h)``. The encoding's terms on the band
(:class:`~posx.kernels.band_terms.BandTerms`) are measured from the far keys' (the per-query
constant cancels in the softmax, and the far value is added once, the probabilities summing
to 1).

Two routes for the band: with value terms the band's probabilities are needed, so its softmax
is explicit (jointly with the far part's log-sum-exp); without, the flash kernel takes each
chunk with the terms on the band's diagonals of its mask and ``-inf`` elsewhere.

Without a gradient only (the kernel's log-sum-exp has none) and on the CPU; callers check
:func:`~posx.kernels.blocked.fused_lse_available` and
:func:`~posx.kernels.relative.consecutive_positions`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posx.kernels.band_terms import BandTerms, BandTermsWriter
from posx.kernels.flash import flash_lse, merge_by_lse

# Queries per chunk: a chunk multiplies its ``c`` queries by the ``c + n - 1`` keys they reach,
# of which each query uses ``n``. Where the band's probabilities are needed here (value terms:
# the explicit route), 16 (with n = 16, half the columns). Where the flash kernel takes the
# band with the terms as its mask, 32: DeBERTa at 16x on the tiny model (n = 128), paired
# with the reference: 0.53 at 16, 0.58 at 32, 0.55 at 64 (2 threads, one process).
BAND_CHUNK = 16
FLASH_CHUNK = 32
# Most elements of one segment's band ``[b, h, queries, c + n - 1]``: its temporaries stay in
# cache and their memory flat at long lengths.
SEGMENT_ELEMENTS = 2**19


def near_band_attend(
    q: Tensor, k: Tensor, v: Tensor, scale: float, n: int, terms: BandTerms
) -> Tensor:
    """Causal attention at consecutive positions whose relative terms stop changing ``n`` keys
    back (:class:`~posx.kernels.band_terms.BandTerms`).

    Args:
        q: Queries ``[b, h, s, d_h]``.
        k: Keys ``[b, h, s, d_h]``.
        v: Values ``[b, h, s, d_h]``.
        scale: Logit scale.
        n: Band width, ``>= 1``: keys ``[i - n + 1, i]`` of query ``i`` are near.
        terms: The terms.

    Returns:
        ``[b, h, s, d_h]`` in ``v``'s dtype.
    """
    b, h, s, d_h = q.shape
    # query i >= n also sees keys [0, i - n]: a causal attention of q[n:] over k[:s - n]
    far_out = far_lse = None
    if s > n:
        far_out, far_lse = flash_lse(
            q[..., n:, :], k[..., : s - n, :], v[..., : s - n, :], scale, causal=True
        )
    explicit = terms.has_values
    c = BAND_CHUNK if explicit else FLASH_CHUNK
    chunks = -(-s // c)
    qs = _padded(q, chunks * c, scale)  # [b, h, chunks * c, d_h]
    (keys, flat_keys), (values, _) = _windows(k, chunks, c, n), _windows(v, chunks, c, n)
    per = max(1, SEGMENT_ELEMENTS // (b * h * c * (c + n - 1)))  # chunks per segment
    band_terms = BandTermsWriter(terms, flat_keys, (b, h, s), c, n)
    mask = None if explicit else qs.new_full((b, h, min(per, chunks), c, c + n - 1), -torch.inf)
    outputs = []
    for t0 in range(0, chunks, per):
        t1 = min(chunks, t0 + per)
        i0, i1 = t0 * c, min(s, t1 * c)
        f0 = min(max(i0, n), i1)  # first query of the segment with far keys
        rows = qs[..., i0 : t1 * c, :].unflatten(-2, (t1 - t0, c))
        near_keys, near_values = keys[:, :, t0:t1], values[:, :, t0:t1]
        if mask is not None:
            segment_mask = mask[:, :, : t1 - t0]
            logits = _diagonals(segment_mask, n)  # the rest of the mask stays -inf
        else:
            # a tensor of its own: a softmax over the strided view ran several times slower
            logits = rows.new_empty(*rows.shape[:-1], n)
        band_terms.write(logits, rows, t0, t1)
        if i0 < n - 1:  # the first queries' band reaches before key 0
            _before_start_(logits, n, i0)
        far = None
        if f0 < i1:
            far = (far_out[..., f0 - n : i1 - n, :], far_lse[..., f0 - n : i1 - n])
        if mask is not None:
            out = _flash_band(rows, near_keys, near_values, segment_mask, i1 - i0, f0 - i0, far)
        else:
            band = rows @ near_keys.transpose(-1, -2)  # [b, h, t1 - t0, c, c + n - 1]
            logits += _diagonals(band, n)
            out = _explicit_band(logits, band, near_values, i1 - i0, f0 - i0, far)
            out += band_terms.value_terms(logits, i1 - i0)
        outputs.append(out)
    out = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-2)
    return out.to(v.dtype)


def _explicit_band(
    logits: Tensor,
    band: Tensor,
    values: Tensor,
    queries: int,
    f: int,
    far: tuple[Tensor, Tensor] | None,
) -> Tensor:
    """The band's softmax (jointly with the far part's log-sum-exp, from query ``f`` of the
    segment on), its value product and the far part's share: ``[b, h, queries, d_h]``;
    ``logits`` ends up holding the probabilities."""
    far_weight = _softmax_(logits, None if far is None else far[1], f, queries)
    band.zero_()
    _diagonals(band, logits.shape[-1]).copy_(logits)
    out = (band @ values).flatten(-3, -2)[..., :queries, :]  # [b, h, queries, d_h]
    if far is not None:
        out[..., f:, :].addcmul_(far_weight.unsqueeze(-1), far[0].float())
    return out


def _flash_band(
    rows: Tensor,
    keys: Tensor,
    values: Tensor,
    mask: Tensor,
    queries: int,
    f: int,
    far: tuple[Tensor, Tensor] | None,
) -> Tensor:
    """The segment's chunks through the flash kernel, each chunk's queries against the
    ``c + n - 1`` keys they reach, with ``mask`` (the terms on the band's diagonals, ``-inf``
    elsewhere: later keys, and those of the far part); merged with the far part from query
    ``f`` on.

    Args:
        rows: Queries times the scale ``[b, h, chunks, c, d_h]``.
        keys: Windows ``[b, h, chunks, c + n - 1, d_h]``.
        values: Windows ``[b, h, chunks, c + n - 1, d_h]``.
        mask: ``[b, h, chunks, c, c + n - 1]``.
        queries: Queries of the segment (the last chunk may run past them).
        f: First query of the segment with far keys.
        far: The far part's output and log-sum-exp from query ``f`` on, or ``None``.

    Returns:
        ``[b, h, queries, d_h]``.
    """
    b, h, chunks, c, d_h = rows.shape
    flat = [x.flatten(0, 1) for x in (rows, keys, values, mask)]  # heads of b h, chunk as head
    out, lse = flash_lse(*flat[:3], 1.0, flat[3])
    out = out.reshape(b, h, chunks * c, d_h)[..., :queries, :]
    if far is None:
        return out
    lse = lse.reshape(b, h, chunks * c)[..., f:queries]
    out[..., f:, :] = merge_by_lse(out[..., f:, :], lse, *far)
    return out


def _padded(x: Tensor, rows: int, scale: float) -> Tensor:
    """``scale * x`` (float32) in a new ``[b, h, rows, d]`` tensor, zero after ``x``'s rows."""
    b, h, s, d = x.shape
    out = torch.empty(b, h, rows, d, device=x.device)
    torch.mul(x, scale, out=out[..., :s, :])
    out[..., s:, :] = 0
    return out


def _windows(x: Tensor, chunks: int, c: int, n: int) -> tuple[Tensor, Tensor]:
    """Overlapping views ``[b, h, chunks, c + n - 1, d]`` of ``x [b, h, s, d]`` (float32):
    window ``t`` holds rows ``t c - n + 1`` up to ``t c + c - 1``; and the buffer behind them.

    One copy of ``x``, heads end to end in rows of ``chunks * c`` (zero after ``s``) behind
    ``n - 1`` zero rows, serves every window as a strided view: the rows a head's first window
    reads before its row 0 are the previous head's last ones (finite, and masked out), so the
    batched products read it in place.
    """
    b, h, s, d = x.shape
    length = chunks * c
    flat = torch.zeros(n - 1 + b * h * length, d, device=x.device)
    flat[n - 1 :].view(b, h, length, d)[..., :s, :] = x
    size = (b, h, chunks, c + n - 1, d)
    return flat.as_strided(size, (h * length * d, length * d, c * d, d, 1)), flat


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
