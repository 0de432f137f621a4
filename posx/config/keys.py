"""Dotted config keys as overrides name them: one rule for "this key, or a key below it"."""

from __future__ import annotations

from collections.abc import Iterable


def override_key(override: str) -> str:
    """The key a ``key=value`` override sets: ``+a.b=1`` -> ``a.b``."""
    return override.split("=", 1)[0].lstrip("+~")


def at_or_below(key: str, nodes: Iterable[str]) -> bool:
    """Whether ``key`` is one of ``nodes`` or lies below one (``train.lr`` below ``train``)."""
    return any(key == node or key.startswith(f"{node}.") for node in nodes)
