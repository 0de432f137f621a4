"""The length an extension fine-tunes at, its scaling factor and the lengths it is evaluated at,
from one number: ``extend.factor``.

The factor counts from the parent: an extension fine-tunes at ``extend.factor`` × the parent's
``train.length`` unless ``extend.length`` is named (a contradiction is said in one warning
line). Its scaling counts from the first base's positions (``extend.base_length``), so a chain
32 -> 128 -> 512 is ``yarn×4`` and then ``yarn×16``. It is evaluated at its own length, 2× and 4×
of it, and at its parent's lengths, unless ``eval.lengths`` is named.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from posx.errors import ConfigError, PosxWarning

# Keys of the parent's own command line that described how it was extended, not how its
# child is: the child's factor and length are its own.
PARENT_ONLY = ("extend.length", "extend.factor")
EVAL_MULTIPLES = (1, 2, 4)


@dataclass(frozen=True)
class Lengths:
    """One launch's lengths: what ``posx extend`` sets (``extend.length`` only when the user
    did not name it, ``eval.lengths`` likewise)."""

    factor: float
    length: int
    parent_length: int
    base_length: int
    explicit_length: bool
    eval_lengths: tuple[int, ...] | None

    @property
    def base_factor(self) -> float:
        """The scaling's factor over the first base's positions."""
        return self.factor * self.parent_length / self.base_length

    def settings(self) -> list[str]:
        """The overrides that set these lengths (after the user's, so they win)."""
        out = [
            f"extend.parent_length={self.parent_length}",
            f"extend.base_factor={_number(self.base_factor)}",
        ]
        if not self.explicit_length:
            out.append(f"extend.length={self.length}")
        if self.eval_lengths is not None:
            out.append(f"eval.lengths=[{','.join(map(str, self.eval_lengths))}]")
        return out

    def applied(self, cfg: DictConfig) -> DictConfig:
        """A copy of ``cfg`` with :meth:`settings` set, each value parsed as Hydra parses an
        override: what composing again with them gives (they only set values; the
        interpolations that read them resolve later), without a second compose per launch."""
        from hydra.core.override_parser.overrides_parser import OverridesParser

        out = copy.deepcopy(cfg)
        for override in OverridesParser.create().parse_overrides(self.settings()):
            OmegaConf.update(out, override.key_or_group, override.value(), merge=False)
        return out


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def launch_lengths(cfg: DictConfig, parent: DictConfig, user_keys: set[str]) -> Lengths:
    """The lengths of one launch.

    Args:
        cfg: The extension's config composed from the launch's overrides (its factor).
        parent: The parent's composed config (its training and eval lengths).
        user_keys: The keys the user named (``extend.length``, ``eval.lengths``).

    Raises:
        ConfigError: A factor below 1, or one whose length is not whole.
    """
    factor = float(cfg.extend.factor)
    parent_length = int(parent.train.length)
    base_length = int(OmegaConf.select(parent, "extend.base_length") or parent_length)
    default = factor * parent_length
    if factor < 1:  # the scaling's own check would say "RoPE scaling factor", not the key
        raise ConfigError(
            f"extend.factor must be >= 1 (an extension fine-tunes at extend.factor × the "
            f"parent's train.length {parent_length}), got {_number(factor)}"
        )
    if not default.is_integer():
        raise ConfigError(
            f"extend.factor={_number(factor)} times the parent's train.length {parent_length} "
            "is not a whole length; choose a factor that gives one, or name extend.length"
        )
    explicit = "extend.length" in user_keys
    length = int(cfg.extend.length) if explicit else int(default)
    if explicit and length != int(default):
        warnings.warn(
            f"extend.length={length} is {_number(length / parent_length)}× the parent's "
            f"train.length {parent_length}, but extend.factor={_number(factor)} says "
            f"{int(default)}: fine-tuning at {length} with the scaling's factor "
            f"{_number(factor * parent_length / base_length)}",
            PosxWarning,
            stacklevel=2,
        )
    lengths = None
    if "eval.lengths" not in user_keys:
        own = {length * m for m in EVAL_MULTIPLES}
        lengths = tuple(sorted(own | {int(x) for x in parent.eval.lengths}))
    return Lengths(factor, length, parent_length, base_length, explicit, lengths)
