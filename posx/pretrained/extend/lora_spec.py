"""LongLoRA's settings as a method yaml gives them (``longlora:``), read before torch is imported
(a method is read to name the run before the model's libraries load)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from posx.errors import ConfigError


@dataclass(frozen=True)
class LoraSpec:
    """LongLoRA's settings (the method yaml's ``longlora:`` node).

    Attributes:
        rank: LoRA rank ``r``.
        alpha: LoRA scale ``alpha`` (the update is ``alpha / r * B A``).
        targets: Names of the linear layers LoRA adapts.
        trainable: Parameter-name parts that train in full (embeddings, norms).
        group_fraction: S²-Attn's group as a fraction of the training length.
    """

    rank: int = 8
    alpha: float = 16.0
    targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    trainable: tuple[str, ...] = ("embed", "norm")
    group_fraction: float = 0.25

    @classmethod
    def read(cls, name: str, node: Any) -> LoraSpec:
        """The spec of method ``name``'s ``longlora:`` node.

        Raises:
            ConfigError: A key it does not take, or a value of the wrong kind.
        """
        if not isinstance(node, dict):
            raise ConfigError(f"extension={name}: longlora must be a mapping of settings")
        known = {"rank", "alpha", "targets", "trainable", "group_fraction"}
        other = sorted(set(node) - known)
        if other:
            raise ConfigError(
                f"extension={name}: longlora has no setting {other[0]!r}; it takes "
                + ", ".join(sorted(known))
            )
        spec = cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in node.items()})
        ok = isinstance(spec.rank, int) and spec.rank > 0 and spec.alpha > 0
        ok = ok and all(isinstance(t, str) for t in (*spec.targets, *spec.trainable))
        if not ok or not spec.targets or not 0 < spec.group_fraction <= 1:
            raise ConfigError(
                f"extension={name}: longlora needs rank > 0, alpha > 0, a list of targets and "
                "group_fraction in (0, 1]"
            )
        return spec
