"""One mechanism for every encoding whose parameters may differ per layer.

The literature differs (ALiBi and T5 share one parameter set; KERPLE, FIRE, Shaw learn one per
layer), so an encoding whose attention-time parameters may differ by layer subclasses
:class:`PerLayer`, the *owner*. It holds ``n_sets`` parameter sets (1 when shared, ``n_layers``
when per layer) and computes one set's hooks in :meth:`PerLayer.layer_bias`,
:meth:`PerLayer.layer_attend` and :meth:`PerLayer.layer_rotate`, which take the set's index.
Where the sets live is the subclass's choice: stacked along a leading ``n_sets`` axis, or one
plain parameter module per set in ``self.layers`` (keys ``layers.{i}.*``, as checkpoints of
those encodings hold them). Parameters that every layer shares sit next to them in the owner.

The model asks ``encoding.for_layer(i)`` for every layer. With one set the owner serves every
layer itself (and its hooks work); with more, ``for_layer(i)`` is a :class:`LayerView`, a
parameter-free encoding that forwards its hooks to the owner with index ``i``, and calling a
hook on the owner is an error: there is no "layer 0 by default".
"""

from __future__ import annotations

from collections.abc import Hashable

from torch import Tensor

from posx.encodings.base import PositionalEncoding, ScoreMod
from posx.kernels.flex.tables import FlexScores


class PerLayer(PositionalEncoding):
    """Base for encodings with one parameter set per layer or one shared by all layers.

    Subclasses implement the ``layer_*`` hooks they need; ``has_bias`` / ``has_attend`` follow
    from which ones they override.

    Args:
        n_layers: Number of layers in the model.
        per_layer: One parameter set per layer (else one shared set).
    """

    def __init__(self, n_layers: int, per_layer: bool) -> None:
        super().__init__()
        if n_layers < 1:
            raise ValueError(f"n_layers must be >= 1, got {n_layers}")
        self.n_layers = n_layers
        self.per_layer = bool(per_layer)
        self.n_sets = n_layers if self.per_layer else 1
        # Made on first use and kept: attention caches per layer encoding (flex probe, bias
        # blocks) by identity. A plain dict: views own nothing, so nothing here is registered.
        self._views: dict[int, LayerView] = {}

    def layer_bias(self, q_pos: Tensor, k_pos: Tensor, layer: int) -> Tensor:
        """Set ``layer``'s bias ``[(b,) h, sq, sk]``; see :meth:`PositionalEncoding.bias`."""
        raise NotImplementedError(f"{type(self).__name__} adds no attention bias")

    def layer_attend(
        self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int
    ) -> Tensor:
        """Set ``layer``'s attention ``[b, h, sq, d_h]``; see :meth:`PositionalEncoding.attend`."""
        raise NotImplementedError(f"{type(self).__name__} has no attention override")

    def layer_score_mod(self, q_pos: Tensor, k_pos: Tensor, layer: int) -> ScoreMod:
        """Set ``layer``'s FlexAttention ``score_mod``; see :meth:`PositionalEncoding.score_mod`."""
        raise NotImplementedError(f"{type(self).__name__} has no FlexAttention score_mod")

    def layer_flex_scores(
        self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int
    ) -> FlexScores | None:
        """Set ``layer``'s FlexAttention scores; see :meth:`PositionalEncoding.flex_scores`."""
        raise NotImplementedError(f"{type(self).__name__} has no FlexAttention scores")

    def layer_rotate(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int
    ) -> tuple[Tensor, Tensor]:
        """Set ``layer``'s rotation of ``q``, ``k``; see :meth:`PositionalEncoding.rotate`."""
        return q, k

    def set_index(self, layer: int | None, hook: str) -> int:
        """The parameter set that ``hook`` uses: ``layer``, or the only set when ``None``.

        Raises:
            RuntimeError: ``layer`` is ``None`` and there is one set per layer.
            IndexError: ``layer`` is not a set of this encoding.
        """
        if layer is None:
            if self.n_sets > 1:
                raise RuntimeError(
                    f"{type(self).__name__} has per-layer parameters ({self.n_sets} sets): "
                    f"call for_layer(i).{hook}(...), not {hook} on the encoding itself"
                )
            return 0
        if not 0 <= layer < self.n_sets:
            raise IndexError(f"{type(self).__name__} has sets 0..{self.n_sets - 1}, got {layer}")
        return layer

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return self.layer_bias(q_pos, k_pos, self.set_index(None, "bias"))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return self.layer_attend(q, k, v, q_pos, k_pos, self.set_index(None, "attend"))

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        return self.layer_rotate(q, k, q_pos, k_pos, self.set_index(None, "rotate"))

    def score_mod(self, q_pos: Tensor, k_pos: Tensor) -> ScoreMod:
        return self.layer_score_mod(q_pos, k_pos, self.set_index(None, "score_mod"))

    def flex_scores(
        self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor
    ) -> FlexScores | None:
        return self.layer_flex_scores(q, k, v, q_pos, k_pos, self.set_index(None, "flex_scores"))

    @property
    def has_bias(self) -> bool:
        return type(self).layer_bias is not PerLayer.layer_bias

    @property
    def has_attend(self) -> bool:
        return type(self).layer_attend is not PerLayer.layer_attend

    @property
    def has_score_mod(self) -> bool:
        return type(self).layer_score_mod is not PerLayer.layer_score_mod

    @property
    def has_flex_scores(self) -> bool:
        return type(self).layer_flex_scores is not PerLayer.layer_flex_scores

    def for_layer(self, index: int) -> PositionalEncoding:
        if not 0 <= index < self.n_layers:
            raise IndexError(
                f"{type(self).__name__} has layers 0..{self.n_layers - 1}, got {index}"
            )
        if self.n_sets == 1:
            return self
        if index not in self._views:
            self._views[index] = LayerView(self, index)
        return self._views[index]

    def extra_repr(self) -> str:
        return f"per_layer={self.per_layer}"


class LayerView(PositionalEncoding):
    """Layer ``index``'s encoding: the owner's hooks computed from parameter set ``index``.

    It owns no parameters, buffers or submodules, so the model's parameters, ``state_dict`` and
    ``.to()`` see the owner's weights once.

    Args:
        owner: The encoding that holds the parameters.
        index: The layer (and parameter set) this view computes.
    """

    def __init__(self, owner: PerLayer, index: int) -> None:
        super().__init__()
        self.index = index
        self.max_len = owner.max_len
        self.owner_name = type(owner).__name__
        self._has_bias, self._has_attend = owner.has_bias, owner.has_attend
        self._has_score_mod, self._has_flex_scores = owner.has_score_mod, owner.has_flex_scores
        self.relative_bias = owner.relative_bias  # FlexAttention's per-distance table applies
        self.score_mod_trains = owner.score_mod_trains
        # The owner's bound methods, not the owner: assigning a module would register it as a
        # child of its own view, a module cycle (owner -> view -> owner).
        self._layer_bias = owner.layer_bias
        self._layer_attend = owner.layer_attend
        self._layer_rotate = owner.layer_rotate
        self._layer_score_mod = owner.layer_score_mod
        self._layer_flex_scores = owner.layer_flex_scores
        self._owner_cache_key = owner.cache_key
        self._owner_unsupported_reason = owner.unsupported_reason

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return self._layer_bias(q_pos, k_pos, self.index)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return self._layer_attend(q, k, v, q_pos, k_pos, self.index)

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        return self._layer_rotate(q, k, q_pos, k_pos, self.index)

    def score_mod(self, q_pos: Tensor, k_pos: Tensor) -> ScoreMod:
        return self._layer_score_mod(q_pos, k_pos, self.index)

    def flex_scores(
        self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor
    ) -> FlexScores | None:
        return self._layer_flex_scores(q, k, v, q_pos, k_pos, self.index)

    @property
    def has_bias(self) -> bool:
        return self._has_bias

    @property
    def has_attend(self) -> bool:
        return self._has_attend

    @property
    def has_score_mod(self) -> bool:
        return self._has_score_mod

    @property
    def has_flex_scores(self) -> bool:
        return self._has_flex_scores

    def cache_key(self) -> Hashable:
        return self._owner_cache_key()  # the weights are the owner's

    def unsupported_reason(self, length: int) -> str | None:
        return self._owner_unsupported_reason(length)

    def extra_repr(self) -> str:
        return f"layer={self.index} of {self.owner_name}"
