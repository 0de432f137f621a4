"""FIRE: functional interpolation for relative positions (Li et al. 2023).

    bias(i, j) = f( psi(i - j) / psi(max(i, L)) ),   psi(x) = log(c x + 1)

with ``f`` a small MLP (1 -> width -> heads, ReLU), ``c > 0`` learned and the threshold ``L``
learned as ``|multiplier * L_0|``. Dividing by ``psi`` of the *query* position maps every
distance a query can see into ``[0, 1]``, so longer sequences interpolate rather than
extrapolate; ``L`` keeps short prefixes from being stretched. Defaults follow the paper's
reference code (``c_0 = 0.1``, width 32, ``eps = 1e-6``); ``L_0`` defaults to the training
length (the paper used 512).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posx.encodings.base import add_head_dim, as_float, relative_distance, values_are_concrete
from posx.encodings.per_layer import PerLayer
from posx.kernels.flex.attention import ScoreMod
from posx.kernels.flex.mods import LogDistance, mlp_score_mod, piecewise_score_mod


class FIRE(PerLayer):
    """Learned MLP of the progressively normalised log distance.

    Training on CUDA takes the blocked kernel (``score_mod_trains``): FlexAttention's compiled
    backward (torch 2.11 on an H200) refused the unrolled MLP's captured weights, indexed per
    unit ("multiple indexing operations on the same tensor that requires gradients"), and,
    captured one 0-d tensor per unit, failed lowering their gradients. Evaluation (the
    piecewise-linear form, no gradient) runs in FlexAttention.

    Args:
        n_heads: Number of attention heads (MLP outputs).
        n_layers: Number of layers.
        train_length: Training length, the default ``L_0``.
        width: MLP hidden width.
        init_c: Initial ``c``.
        init_threshold: ``L_0``; ``None`` uses ``train_length``.
        per_layer: One FIRE per layer (else one shared by all layers).
        eps: Added to the normaliser so it is never 0.
    """

    score_mod_trains = False

    def __init__(
        self,
        n_heads: int,
        n_layers: int = 1,
        train_length: int | None = None,
        width: int = 32,
        init_c: float = 0.1,
        init_threshold: float | None = None,
        per_layer: bool = True,
        eps: float = 1e-6,
    ) -> None:
        super().__init__(n_layers, per_layer)
        threshold = init_threshold if init_threshold is not None else train_length
        if threshold is None or threshold <= 0:
            raise ValueError(f"FIRE needs a positive init_threshold, got {threshold}")
        if init_c <= 0 or width < 1:
            raise ValueError(f"FIRE needs init_c > 0 and width >= 1, got {init_c} and {width}")
        self.n_heads, self.width, self.eps = n_heads, width, eps
        n = self.n_sets
        self.c = nn.Parameter(torch.full((n,), float(init_c)))
        self.register_buffer("init_threshold", torch.tensor(float(threshold)))
        self.threshold_mult = nn.Parameter(torch.ones(n))
        # The MLP, stacked over layer sets: nn.Linear's default init, one set at a time.
        w1, b1, w2, b2 = [], [], [], []
        for _ in range(n):
            first, second = nn.Linear(1, width), nn.Linear(width, n_heads)
            w1.append(first.weight[:, 0].detach())
            b1.append(first.bias.detach())
            w2.append(second.weight.detach())
            b2.append(second.bias.detach())
        self.w1 = nn.Parameter(torch.stack(w1))  # [n, width]
        self.b1 = nn.Parameter(torch.stack(b1))  # [n, width]
        self.w2 = nn.Parameter(torch.stack(w2))  # [n, heads, width]
        self.b2 = nn.Parameter(torch.stack(b2))  # [n, heads]

    def decayed_parameter_names(self) -> set[str]:
        # The MLP's weights decay like the model's matrices; its biases, c and the threshold
        # multiplier do not (zero is no neutral value for c or L). See docs/encodings.md.
        return {"w1", "w2"}

    def threshold(self, layer: int | None = None) -> Tensor:
        """The learned ``L`` of ``layer`` (``None``: the only set), a scalar tensor."""
        return (self.threshold_mult[self.set_index(layer, "threshold")] * self.init_threshold).abs()

    def normalized_distance(self, q_pos: Tensor, k_pos: Tensor, layer: int | None = None) -> Tensor:
        """``psi(|i - j|) / (psi(max(i, L)) + eps)`` ``[(b,) sq, sk]`` of ``layer``."""
        layer = self.set_index(layer, "normalized_distance")
        q, k = as_float(q_pos).float(), as_float(k_pos).float()
        c = self.c[layer]
        dist = relative_distance(q, k).abs()
        rel = torch.log(torch.abs(c * dist) + 1)
        norm = torch.log(torch.abs(c * torch.maximum(q, self.threshold(layer))) + 1) + self.eps
        return rel / norm.unsqueeze(-1)

    def layer_bias(self, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor:
        x = self.normalized_distance(q_pos, k_pos, layer)  # [(b,) sq, sk]
        if not torch.is_grad_enabled() and values_are_concrete(x):
            return self._piecewise_bias(x, layer)
        x = x.unsqueeze(-1)  # [(b,) sq, sk, 1]
        hidden = F.relu(x * self.w1[layer] + self.b1[layer])  # [(b,) sq, sk, width]
        out = F.linear(hidden, self.w2[layer], self.b2[layer])  # [(b,) sq, sk, h]
        return add_head_dim(out)

    def layer_score_mod(self, q_pos: Tensor, k_pos: Tensor, layer: int) -> ScoreMod:
        """``layer``'s bias as FlexAttention's ``score_mod`` (:mod:`posx.kernels.flex.mods`):
        the MLP unrolled where a gradient flows, its piecewise-linear form where none does, as
        :meth:`layer_bias` chooses; the per-query normaliser is computed here, once."""
        layer = self.set_index(layer, "score_mod")
        q, k = as_float(q_pos).float(), as_float(k_pos).float()
        c = self.c[layer]
        norm = torch.log(torch.abs(c * torch.maximum(q, self.threshold(layer))) + 1) + self.eps
        x = LogDistance(q, k, c, norm)
        if torch.is_grad_enabled():
            return mlp_score_mod(x, self.w1[layer], self.b1[layer], self.w2[layer], self.b2[layer])
        slopes, intercepts, kinks = self._segments(layer)
        return piecewise_score_mod(x, kinks, slopes, intercepts)

    def _piecewise_bias(self, x: Tensor, layer: int) -> Tensor:
        """The MLP as the piecewise-linear function of ``x`` it is, for evaluation.

        ``f(x) = W2 relu(w1 x + b1) + b2`` with a scalar ``x``: between two of the hidden
        units' kinks ``-b1/w1`` the set of active units is fixed, so ``f`` is ``A x + B`` per
        head with ``A``, ``B`` summed over that set (computed in float64, ``width + 1``
        segments). Per pair that is a search among the kinks and two reads per head instead
        of a ``width``-wide hidden layer: what made FIRE the slowest encoding at long lengths
        (its bias cannot be tabulated by distance). Same values up to rounding; no gradient
        (training keeps the MLP, whose gradient at a kink this would not reproduce).

        Args:
            x: Normalised distances ``[(b,) sq, sk]``.
            layer: Index of this layer's parameter set.

        Returns:
            ``[(b,) h, sq, sk]``, contiguous.
        """
        slopes, intercepts, kinks = self._segments(layer)
        segment = torch.searchsorted(kinks, x.contiguous()).flatten(-2)  # [(b,) sq * sk]
        # Slopes and intercepts in one table, read with one gather whose index is shared by
        # the heads (an expanded index: as posx.kernels.relative.distance_block).
        table = torch.cat((slopes, intercepts))  # [2h, width + 1]
        lead = segment.shape[:-1]  # (b,) or ()
        table = table.view(2 * self.n_heads, *(1 for _ in lead), -1).expand(-1, *lead, -1)
        both = torch.gather(table, -1, segment.expand(2 * self.n_heads, *segment.shape))
        slope, intercept = both.view(2, self.n_heads, *x.shape).unbind(0)
        bias = torch.addcmul(intercept, slope, x)  # [h, (b,) sq, sk]
        return bias.transpose(0, 1).contiguous() if x.dim() == 3 else bias

    def _segments(self, layer: int) -> tuple[Tensor, Tensor, Tensor]:
        """Slopes and intercepts ``[h, width + 1]`` (float32) of the MLP on each segment
        between its sorted kinks ``[width]`` (float32; a unit that never turns is given a kink
        that no ``x`` reaches, so its segments coincide)."""
        w1, b1 = self.w1[layer].double(), self.b1[layer].double()
        w2, b2 = self.w2[layer].double(), self.b2[layer].double()
        kinks = torch.where(w1 != 0, -b1 / w1.where(w1 != 0, 1.0), torch.inf).sort().values
        finite = kinks[kinks.isfinite()]
        if finite.numel() == 0:
            finite = kinks.new_zeros(1)
        # one point inside each segment: below the first kink, between neighbours, above the last
        inner = torch.where(kinks.isfinite(), kinks, finite.max() + 1.0)
        points = torch.cat(
            (inner[:1] - 1.0, (inner[:-1] + inner[1:]) / 2, inner[-1:] + 1.0)
        )  # [width + 1]
        active = (points.unsqueeze(-1) * w1 + b1 > 0).double()  # [width + 1, width]
        slopes = (w2 * w1) @ active.T  # [h, width + 1]
        intercepts = (w2 * b1) @ active.T + b2.unsqueeze(-1)
        return slopes.float(), intercepts.float(), kinks.float()

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, width={self.width}, {super().extra_repr()}"
