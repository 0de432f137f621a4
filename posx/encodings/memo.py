"""Reuse of tensors computed from positions.

Every layer of a forward sees the same positions, and so does every step of a run at a fixed
length, yet a RoPE table lookup or an attention-bias block would be recomputed each time.
:class:`PositionMemo` returns the earlier tensor while the positions (compared by value) and
the caller's key (dtype, parameter versions, ...) are unchanged.

A tensor that carries autograd history is only reused inside the :func:`forward_scope` it was
made in (one model forward): after that forward's backward its graph is gone, and reusing it in
the next forward would fail or, worse, miss gradients.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

import torch
from torch import Tensor, nn

T = TypeVar("T", Tensor, tuple[Tensor, ...])

_SCOPE: ContextVar[object | None] = ContextVar("posx_forward_scope", default=None)


@contextmanager
def forward_scope() -> Iterator[None]:
    """Marks one model forward: tensors with autograd history are shared within it only."""
    token = _SCOPE.set(object())
    try:
        yield
    finally:
        _SCOPE.reset(token)


def parameter_versions(module: nn.Module) -> tuple[int, ...]:
    """In-place update counters of a module's parameters and buffers.

    An optimizer step or ``load_state_dict`` bumps them, so a key holding them goes stale
    exactly when a value computed from the module would change.
    """
    return tuple(
        t._version for t in (*module.parameters(), *module.buffers()) if not t.is_inference()
    )


class PositionMemo:
    """A small cache of tensors keyed by positions (by value) and a caller's key.

    Args:
        max_elements: Most elements held at once; a value larger than this is never kept, and
            older entries are dropped to make room (memory stays bounded at any length).
    """

    def __init__(self, max_elements: int = 2**22) -> None:
        self.max_elements = max_elements
        # key -> (positions it was computed for, forward scope or None, value)
        self._entries: dict[Hashable, tuple[tuple[Tensor, ...], object | None, T]] = {}
        self._held = 0

    def get(self, key: Hashable, positions: tuple[Tensor, ...], compute: Callable[[], T]) -> T:
        """The value for ``key`` at ``positions``, computed by ``compute()`` when not held."""
        full_key = (
            key,
            torch.is_grad_enabled(),
            torch.is_inference_mode_enabled(),
            tuple((p.shape, p.dtype, p.device) for p in positions),
        )
        scope = _SCOPE.get()
        hit = self._entries.get(full_key)
        if hit is not None:
            stored, made_in, value = hit
            if (made_in is None or made_in is scope) and all(
                torch.equal(a, b) for a, b in zip(stored, positions, strict=True)
            ):
                return value
            self._drop(full_key)
        value = compute()
        tensors = value if isinstance(value, tuple) else (value,)
        size = sum(t.numel() for t in tensors)
        tracked = any(t.requires_grad for t in tensors)
        if size > self.max_elements or (tracked and scope is None):
            return value
        while self._entries and self._held + size > self.max_elements:
            self._drop(next(iter(self._entries)))  # oldest first
        # Clones: a caller may later change its positions tensor in place.
        kept = tuple(p.detach().clone() for p in positions)
        self._entries[full_key] = (kept, scope if tracked else None, value)
        self._held += size
        return value

    def _drop(self, key: Hashable) -> None:
        _, _, value = self._entries.pop(key)
        self._held -= sum(t.numel() for t in (value if isinstance(value, tuple) else (value,)))

    def clear(self) -> None:
        self._entries.clear()
        self._held = 0
