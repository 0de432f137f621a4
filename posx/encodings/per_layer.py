"""Biases whose parameters may be per layer or shared by all layers.

The literature differs (ALiBi and T5 share one set; KERPLE learns one per layer), so the choice
is a constructor argument. Parameters live in the owner, stacked along a leading layer axis;
``for_layer(i)`` hands the model a light view that computes layer ``i``'s bias from them.
"""

from __future__ import annotations

from collections.abc import Hashable

from torch import Tensor

from posx.encodings.base import PositionalEncoding


class LayeredBias(PositionalEncoding):
    """Base for bias encodings with shared or per-layer parameters.

    Subclasses implement :meth:`layer_bias`; ``n_sets`` (1, or ``n_layers`` when per layer) is
    the size of their parameters' layer axis.

    Args:
        n_layers: Number of layers in the model.
        per_layer: One parameter set per layer (else one shared set).
    """

    def __init__(self, n_layers: int, per_layer: bool) -> None:
        super().__init__()
        if n_layers < 1:
            raise ValueError(f"n_layers must be >= 1, got {n_layers}")
        self.per_layer = bool(per_layer)
        self.n_sets = n_layers if self.per_layer else 1
        # A plain list, not a ModuleList: the views own nothing and must not form a module cycle.
        views = [LayerView(self, i) for i in range(n_layers)] if self.per_layer else []
        object.__setattr__(self, "_views", views)

    def layer_bias(self, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor:
        """Layer ``layer``'s bias ``[(b,) h, sq, sk]``; see :meth:`PositionalEncoding.bias`."""
        raise NotImplementedError

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return self.layer_bias(q_pos, k_pos, 0)

    def for_layer(self, index: int) -> PositionalEncoding:
        return self._views[index] if self.per_layer else self

    def extra_repr(self) -> str:
        return f"per_layer={self.per_layer}"


class LayerView(PositionalEncoding):
    """Layer ``index``'s bias, computed from the parameters of ``owner``."""

    def __init__(self, owner: LayeredBias, index: int) -> None:
        super().__init__()
        object.__setattr__(self, "owner", owner)  # not registered: the owner holds the weights
        self.index = index

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return self.owner.layer_bias(q_pos, k_pos, self.index)

    @property
    def relative_bias(self) -> bool:  # type: ignore[override]
        return self.owner.relative_bias

    def unsupported_reason(self, length: int) -> str | None:
        return self.owner.unsupported_reason(length)

    def cache_key(self) -> Hashable:
        return self.owner.cache_key()  # the weights are the owner's

    def extra_repr(self) -> str:
        return f"layer={self.index} of {type(self.owner).__name__}"
