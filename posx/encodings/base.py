"""The positional-encoding contract.

An encoding may touch the computation at four places; a subclass overrides only the hooks it
needs, and the base class touches nothing (it *is* NoPE). Positions always arrive as explicit
tensors (``[s]`` shared by the batch, or ``[b, s]``); no hook may assume ``pos == arange(s)``.
A bias may also say how FlexAttention computes it (``score_mod``), and so may an encoding that
computes attention itself (``flex_scores``).

Attention asks ``has_bias`` / ``has_attend`` / ``has_score_mod`` / ``has_flex_scores`` to pick
its kernel, so model code never branches on an encoding's name.
"""

from __future__ import annotations

from collections.abc import Hashable

import torch
from torch import Tensor, nn

from posx.errors import ConfigError
from posx.kernels.flex.attention import ScoreMod
from posx.kernels.flex.tables import FlexScores
from posx.kernels.memo import parameter_versions

# GPT-2's embedding init: every learned position table's before `init_std` existed.
TABLE_INIT_STD = 0.02


class PositionalEncoding(nn.Module):
    """Base class and the NoPE encoding (no positional information at all).

    Attributes:
        max_len: Largest number of positions the encoding can represent, or ``None`` when it
            has no limit. The evaluator reports lengths beyond it as unsupported.
        relative_bias: ``bias(q_pos, k_pos)`` depends on ``q_pos - k_pos`` alone. Attention may
            then evaluate it once per distance (a ``[h, distances]`` table), which is how
            FlexAttention runs it; a bias that also reads the positions themselves must leave
            this ``False``.
        score_mod_trains: Its own ``score_mod`` can be differentiated by FlexAttention's
            compiled CUDA backward; ``False`` sends training to the blocked kernel (FIRE).
        score_bytes: Memory per attention score that training keeps (see below).
        block_score_bytes: Memory per attention score of one query block in evaluation.
        needs_structure: Its ``pos`` must come from a strategy that reads the task's token
            structure (Abacus: a digit's place in its number); training refuses it otherwise.
    """

    max_len: int | None = None
    needs_structure: bool = False
    relative_bias: bool = False
    score_mod_trains: bool = True
    # Memory per attention score (one query, key and head) when the encoding computes attention
    # itself or learns its bias, which posx.runs.resources uses to refuse what cannot fit before
    # allocating: training keeps every score of every layer for the backward pass
    # (``score_bytes``); evaluation holds one query block's scores with their temporaries
    # (``block_score_bytes``). Encodings that keep more per score say so.
    score_bytes: int = 16
    block_score_bytes: int = 96

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        """Adds absolute position information to token embeddings.

        Args:
            x: Token embeddings ``[b, s, d]``.
            pos: Positions ``[s]`` or ``[b, s]`` (integer or float).

        Returns:
            Embeddings ``[b, s, d]``.
        """
        return x

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        """Transforms queries and keys by their positions (rotary encodings).

        Args:
            q: Queries ``[b, h, sq, d_h]``.
            k: Keys ``[b, h, sk, d_h]``.
            q_pos: Query positions ``[sq]`` or ``[b, sq]``.
            k_pos: Key positions ``[sk]`` or ``[b, sk]``.

        Returns:
            ``(q, k)`` with the same shapes.
        """
        return q, k

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Additive attention-logit bias, a function of positions only.

        Called per query block, so it must depend only on the positions it is given.

        Args:
            q_pos: Query positions ``[sq]`` or ``[b, sq]``.
            k_pos: Key positions ``[sk]`` or ``[b, sk]``.

        Returns:
            Bias ``[h, sq, sk]`` or ``[b, h, sq, sk]``.
        """
        raise NotImplementedError(f"{type(self).__name__} adds no attention bias")

    def score_mod(self, q_pos: Tensor, k_pos: Tensor) -> ScoreMod:
        """The bias as FlexAttention's ``score_mod``, for a bias that no per-distance table can
        stand for (it reads the query's own position: FIRE) or that is cheaper to compute per
        pair than to read from a table (ALiBi). Encodings with ``relative_bias`` need not
        override this: attention tabulates their bias by distance.

        The function is scalar code, as FlexAttention's compiler requires, and must equal
        ``bias(q_pos, k_pos)`` at every pair; its indexing broadcasts, so tests evaluate it on
        index grids on the CPU.

        Args:
            q_pos: Integer query positions ``[sq]`` or ``[b, sq]``.
            k_pos: Integer key positions ``[sk]`` or ``[b, sk]``.

        Returns:
            ``(score, b, h, q_idx, kv_idx) -> score + bias[b, h, q_idx, kv_idx]``.
        """
        raise NotImplementedError(f"{type(self).__name__} has no FlexAttention score_mod")

    def attend(self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Full causal attention computed by the encoding itself.

        Args:
            q: Queries ``[b, h, sq, d_h]``.
            k: Keys ``[b, h, sk, d_h]``.
            v: Values ``[b, h, sk, d_h]``.
            q_pos: Query positions ``[sq]`` or ``[b, sq]``.
            k_pos: Key positions ``[sk]`` or ``[b, sk]``.

        Returns:
            Attention output ``[b, h, sq, d_h]``.
        """
        raise NotImplementedError(f"{type(self).__name__} has no attention override")

    def flex_scores(
        self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor
    ) -> FlexScores | None:
        """``attend``'s computation as FlexAttention runs it, for an encoding whose scores
        depend on content and distance through per-query (and per-key) tables
        (:mod:`posx.kernels.flex.tables`); attention takes it where ``model.attention_kernel``
        is ``flex`` and FlexAttention can run (on the CPU: without a gradient).

        Must equal ``attend(q, k, v, q_pos, k_pos)``: ``FlexScores.q``, ``k`` (possibly wider
        than ``v``), ``scale``, ``score_mod`` and ``value_term`` make the same scores and
        output, with no ``[s, s]`` tensor.

        Args:
            q: Queries ``[b, h, s, d_h]``.
            k: Keys ``[b, h, s, d_h]``.
            v: Values ``[b, h, s, d_h]``.
            q_pos: Query positions ``[s]`` or ``[b, s]``.
            k_pos: Key positions ``[s]`` or ``[b, s]``.

        Returns:
            The scores, or ``None`` where these positions have no exact route (attention then
            calls ``attend``).
        """
        raise NotImplementedError(f"{type(self).__name__} has no FlexAttention scores")

    def cache_key(self) -> Hashable:
        """What ``bias`` depends on besides positions; attention reuses bias blocks (across
        layers, and across steps when no gradient flows) while it is unchanged.

        The default covers this module's parameters and buffers: their in-place version
        counters change with an optimizer step or a loaded state. An encoding whose bias reads
        state held elsewhere (or plain attributes it mutates) must override this.
        """
        return parameter_versions(self)

    def decayed_parameter_names(self) -> set[str]:
        """Names (as in ``named_parameters()``) of this encoding's parameters that take weight
        decay; the optimizer decays exactly these and no other parameter of the encoding.

        The default decays the weights of ``nn.Linear`` and ``nn.Embedding`` submodules (tables
        and matrices whose zero means "no positional signal", like the model's own) and asks
        encodings nested inside for their own declaration. Bare ``nn.Parameter`` s (slopes,
        kernel parameters, thresholds, biases) are not decayed: weight decay would pull them
        toward an arbitrary point. An encoding whose paper decides otherwise overrides this;
        docs/encodings.md lists the choice for every encoding.
        """
        return decayed_layer_weights(self)

    def for_layer(self, index: int) -> PositionalEncoding:
        """The encoding that layer ``index`` uses; the model asks for every layer.

        ``self`` here: any parameters of these hooks serve every layer. Encodings whose
        parameters may differ by layer subclass :class:`posx.encodings.per_layer.PerLayer`.
        """
        return self

    @property
    def has_bias(self) -> bool:
        return type(self).bias is not PositionalEncoding.bias

    @property
    def has_attend(self) -> bool:
        return type(self).attend is not PositionalEncoding.attend

    @property
    def has_score_mod(self) -> bool:
        return type(self).score_mod is not PositionalEncoding.score_mod

    @property
    def has_flex_scores(self) -> bool:
        return type(self).flex_scores is not PositionalEncoding.flex_scores

    def unsupported_reason(self, length: int) -> str | None:
        """Says why ``length`` positions cannot be evaluated, or ``None`` when they can."""
        if self.max_len is not None and length > self.max_len:
            return f"{type(self).__name__} has {self.max_len} positions; asked for {length}"
        return None

    def extra_repr(self) -> str:
        return "" if self.max_len is None else f"max_len={self.max_len}"


NoPE = PositionalEncoding


def decayed_layer_weights(module: nn.Module) -> set[str]:
    """The default weight-decay declaration of ``module``'s parameters, by name.

    ``nn.Linear`` and ``nn.Embedding`` weights are decayed; a nested
    :class:`PositionalEncoding` answers for its own parameters through
    :meth:`PositionalEncoding.decayed_parameter_names`; nothing else is decayed.
    """
    names: set[str] = set()
    for name, child in module.named_children():
        if isinstance(child, PositionalEncoding):
            inner = child.decayed_parameter_names()
        elif isinstance(child, (nn.Linear, nn.Embedding)):
            inner = {"weight"}
        else:
            inner = decayed_layer_weights(child)
        names |= {f"{name}.{n}" for n in inner}
    return names


def relative_distance(q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """Query-minus-key distance ``i - j`` with broadcasting.

    Args:
        q_pos: ``[sq]`` or ``[b, sq]``.
        k_pos: ``[sk]`` or ``[b, sk]``.

    Returns:
        ``[sq, sk]`` or ``[b, sq, sk]`` (non-negative where the key is visible to the query).
    """
    return q_pos.unsqueeze(-1) - k_pos.unsqueeze(-2)


def add_head_dim(bias: Tensor) -> Tensor:
    """Puts the head axis where attention expects it: ``[.., sq, sk, h] -> [.., h, sq, sk]``."""
    return bias.movedim(-1, -3)


def as_float(pos: Tensor) -> Tensor:
    """Positions as a float tensor: ``pos`` itself when it already is one, else float32."""
    return pos if pos.is_floating_point() else pos.to(torch.float32)


def values_are_concrete(t: Tensor) -> bool:
    """Whether code may read ``t``'s values to choose a shape (``int(t.max())``, a table size).

    False while FlexAttention traces a ``score_mod`` (under ``torch.compile`` or ``vmap``);
    encodings that cache tables sized by the positions then compute their formula directly.
    """
    if torch.compiler.is_compiling():
        return False
    return not torch._C._functorch.is_batchedtensor(t)


def exact_dtype(device: torch.device) -> torch.dtype:
    """float64 where the device has it (tables of phases stay exact at large positions);
    float32 on Apple MPS, which has no float64."""
    return torch.float32 if device.type == "mps" else torch.float64


def table_init_std(init_std: float | None, what: str, key: str = "init_std") -> float:
    """The standard deviation a learned table (positions, or the tokens') starts from.

    Args:
        init_std: The setting; ``None``: :data:`TABLE_INIT_STD`, so a run saved before the
            setting existed builds (and fingerprints) as it did.
        what: The table's owner, for the error (``learned encoding``).
        key: The setting's name, for the error.

    Returns:
        A positive standard deviation.

    Raises:
        ConfigError: The setting is not a number > 0.
    """
    if init_std is None:
        return TABLE_INIT_STD
    if isinstance(init_std, bool) or not isinstance(init_std, int | float) or not init_std > 0:
        raise ConfigError(
            f"{what} needs {key} > 0 (1.0: PyTorch's embedding default), got {init_std!r}"
        )
    return float(init_std)
