"""FlexAttention ``score_mod`` s that compute a bias per pair: an MLP of a normalised log distance.

FIRE's bias ``f(psi(|i - j|) / psi(max(i, L)))`` reads the query's own position, so no
per-distance table can stand for it (:mod:`posx.kernels.flex.attention`), and the blocked kernel
built it per pair of every block: over 40 s at 32k on an H200, 20x alibi. Written as scalar code
it runs inside FlexAttention's fused kernel instead, with no ``[s, s]`` tensor:

- ``x = log(|c (q - k)| + 1) / norm[q]`` from the positions, ``c`` and a per-query normaliser
  ``norm [(b,) sq]`` computed eagerly (with its autograd history);
- training: the MLP ``W2 relu(w1 x + b1) + b2`` unrolled over its hidden units, so FlexAttention's
  backward differentiates exactly what the eager MLP does;
- evaluation: the same MLP as the piecewise-linear function it is (``FIRE._segments``): a binary
  search among the sorted kinks (``log2(width)`` reads) and one slope and intercept per head,
  instead of ``width`` multiply-adds per pair and head.

Both index captured tensors by ``h`` and Python constants, which FlexAttention's compiler lowers;
their indexing also broadcasts, so tests evaluate them on index grids on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from posx.kernels.flex.attention import ScoreMod, position_reader


@dataclass(frozen=True)
class LogDistance:
    """A pair's normalised log distance ``log(|c (q - k)| + 1) / norm[q]``, as FIRE's
    ``normalized_distance`` computes it, in a ``score_mod``.

    Attributes:
        q_pos: Float query positions ``[sq]`` or ``[b, sq]``.
        k_pos: Float key positions ``[sk]`` or ``[b, sk]``.
        c: The log's scale, a 0-d tensor.
        norm: Per-query normaliser ``[sq]`` or ``[b, sq]`` (``psi(max(i, L)) + eps``).
    """

    q_pos: Tensor
    k_pos: Tensor
    c: Tensor
    norm: Tensor

    def reader(self) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
        """``(b, q_idx, kv_idx) -> x`` of each pair."""
        pair = position_reader(self.q_pos, self.k_pos)
        per_row = self.norm.dim() == 2
        c, norm = self.c, self.norm

        def x(b: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            qp, kp = pair(b, q_idx, kv_idx)
            rel = torch.log(torch.abs(c * torch.abs(qp - kp)) + 1)
            return rel / (norm[b, q_idx] if per_row else norm[q_idx])

        return x


def mlp_score_mod(x: LogDistance, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> ScoreMod:
    """Adds ``W2 relu(w1 x + b1) + b2`` of head ``h`` to each score.

    Args:
        x: The pairs' normalised distance.
        w1: First layer's weights ``[width]`` (one input).
        b1: First layer's biases ``[width]``.
        w2: Second layer's weights ``[h, width]``.
        b2: Second layer's biases ``[h]``.

    Returns:
        The ``score_mod`` (unrolled over the ``width`` hidden units).
    """
    value = x.reader()
    width = w1.shape[0]

    def score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        xv = value(b, q_idx, kv_idx)
        out = b2[h]
        for u in range(width):
            out = out + w2[h, u] * torch.relu(w1[u] * xv + b1[u])
        return score + out.to(score.dtype)

    return score_mod


def piecewise_score_mod(
    x: LogDistance, kinks: Tensor, slopes: Tensor, intercepts: Tensor
) -> ScoreMod:
    """Adds ``slopes[h, m] x + intercepts[h, m]``, ``m`` the number of kinks below ``x``.

    Args:
        x: The pairs' normalised distance.
        kinks: Sorted kinks ``[width]`` (``inf`` for a unit that never turns).
        slopes: Per head and segment ``[h, width + 1]``.
        intercepts: Per head and segment ``[h, width + 1]``.

    Returns:
        The ``score_mod``: the segment by binary search (``torch.searchsorted``'s left side,
        as FIRE's eager evaluation takes it), then one multiply-add.
    """
    value = x.reader()
    size = 1 << max(0, kinks.shape[0] - 1).bit_length()  # a power of two >= width
    padded = torch.cat((kinks, kinks.new_full((size - kinks.shape[0],), torch.inf)))
    steps = []
    step = size // 2
    while step:
        steps.append(step)
        step //= 2

    def score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        xv = value(b, q_idx, kv_idx)
        below: Tensor | int = 0  # kinks known to be below x
        for step in steps:
            below = torch.where(padded[below + step - 1] < xv, below + step, below)
        below = below + (padded[below] < xv).to(torch.int64)
        return score + (slopes[h, below] * xv + intercepts[h, below]).to(score.dtype)

    return score_mod
