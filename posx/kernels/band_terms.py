"""An encoding's relative terms on :func:`~posx.kernels.near_band.near_band_attend`'s band
(:class:`BandTerms`), and how a segment of the band receives them (:class:`BandTermsWriter`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class BandTerms:
    """An encoding's terms on the band (row ``m``: distance ``n - 1 - m``) and on far keys.

    The band's logit of query ``i`` and key ``j = i - n + 1 + m`` starts as
    ``scale * q_i . k_j``; each field adds its part. Far keys (``i - j >= n``) score
    ``scale * q_i . k_j`` (a term common to all of a query's far keys cancels: the encoding
    measures the band's terms from it). Tables are shared by the heads (``[n, ..]``) or per
    head (``[h, n, ..]``).

    Attributes:
        query_rows: ``[(h,) n, d_h]``: adds ``scale * q_i . row``.
        key_rows: ``[(h,) n, d_h]``: adds ``k_j . row``.
        bias: ``[(h,) n]``: adds ``row``.
        value_rows: ``[n, d_h]``: adds ``row`` to a near key's value.
        far_value: ``[d_h]``: adds to every key's value (the far keys get only it).
    """

    query_rows: Tensor | None = None
    key_rows: Tensor | None = None
    bias: Tensor | None = None
    value_rows: Tensor | None = None
    far_value: Tensor | None = None

    @property
    def has_values(self) -> bool:
        """Whether values get a term: then the band's probabilities are needed."""
        return self.value_rows is not None or self.far_value is not None


class BandTermsWriter:
    """Writes :class:`BandTerms`' tables on a segment's band, and adds their value terms."""

    def __init__(
        self, terms: BandTerms, flat_keys: Tensor, shape: tuple[int, int, int], c: int, n: int
    ) -> None:
        b, h, _ = shape
        self.shape, self.c, self.n, self.flat_keys = shape, c, n, flat_keys
        bias = None if terms.bias is None else terms.bias.float()
        if bias is not None and bias.dim() == 2:
            bias = bias[:, None, None, :]  # [h, 1, 1, n]: broadcasts over [b, h, t, c, n]
        self.query_rows = self.product_bias = None
        if terms.query_rows is not None:
            rows_t = terms.query_rows.float().transpose(-1, -2)  # [(h,) d_h, n]
            if rows_t.dim() == 3:  # one table per head: a batched product over b h
                rows_t = rows_t.expand(b, h, *rows_t.shape[-2:]).flatten(0, 1)
            self.query_rows = rows_t
            # the bias rides in the product (baddbmm's input) rather than a pass of its own
            if bias is not None and rows_t.dim() == 3:
                self.product_bias = bias.expand(b, h, 1, 1, n).reshape(b * h, 1, n)
                bias = None
        self.bias = bias
        self.key_rows = None
        if terms.key_rows is not None:
            self.key_rows = terms.key_rows.float().transpose(-1, -2)  # [(h,) d_h, n]
        # zeros where a term is absent: only the explicit route (has_values) reads them
        zero = torch.zeros(flat_keys.shape[-1], device=flat_keys.device)
        self.far_value = zero if terms.far_value is None else terms.far_value.float()
        self.value_rows = (
            zero.expand(n, -1) if terms.value_rows is None else terms.value_rows.float()
        )

    def write(self, out: Tensor, rows: Tensor, t0: int, t1: int) -> None:
        """The terms of chunks ``[t0, t1)`` into ``out [b, h, t1 - t0, c, n]`` (any strides)."""
        parts = []
        if self.query_rows is not None:
            flat_rows = rows.flatten(0, 1).flatten(1, 2)  # [b h, t c, d_h]
            if self.query_rows.dim() == 2:
                parts.append(rows @ self.query_rows)
            elif self.product_bias is not None:
                product = torch.baddbmm(self.product_bias, flat_rows, self.query_rows)
                parts.append(product.view(out.shape))
            else:
                parts.append(torch.bmm(flat_rows, self.query_rows).view(out.shape))
        if self.key_rows is not None:
            parts.append(self._key_terms(t0, t1))
        if len(parts) == 2:
            torch.add(parts[0], parts[1], out=out)
        elif parts:
            out.copy_(parts[0])
        else:
            out.zero_()
        if self.bias is not None:
            out += self.bias

    def _key_terms(self, t0: int, t1: int) -> Tensor:
        """``k_j . row_m`` at every band position of chunks ``[t0, t1)``: ``[b, h, t1 - t0, c,
        n]``.

        Each key meets each row once (query ``i = j + n - 1 - m``), so the keys the chunks
        reach are multiplied by the rows once, key-major, and the band read from that product
        along its diagonals: query ``i``'s column ``m`` is row ``i - t0 c + m`` (keys from
        ``t0 c - n + 1``), column ``m``.
        """
        (b, h, s), c, n = self.shape, self.c, self.n
        length, d_h = -(-s // c) * c, self.flat_keys.shape[-1]
        reach = (t1 - t0) * c + n - 1
        size, stride = (b, h, reach, d_h), (h * length * d_h, length * d_h, d_h, 1)
        keys = self.flat_keys.as_strided(size, stride, t0 * c * d_h)
        product = keys @ self.key_rows  # [b, h, reach, n]
        size = (b, h, t1 - t0, c, n)
        return product.as_strided(size, (*product.stride()[:2], c * n, n, n + 1))

    def value_terms(self, probs: Tensor, queries: int) -> Tensor:
        """``sum_m p_m b_m + b_far`` for the segment's queries ``[b, h, queries, d_h]`` (the
        explicit route, taken when there are value terms): with every weight, the far part's
        included, summing to 1, ``b_far`` enters once."""
        terms = (probs @ self.value_rows).add_(self.far_value)  # [b, h, t, c, d_h]
        return terms.flatten(-3, -2)[..., :queries, :]
