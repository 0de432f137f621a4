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

    Eviction. Attention asks for the same keys in a cycle (every bias block, in every layer of
    every forward). When one cycle's values do not all fit, evicting the least recently used
    entry to make room would evict exactly the one needed next, and nothing would ever be hit.
    So an entry used since the key now missing was last asked for is part of the current cycle
    and is kept; the new value is then not stored. Older entries (another length, a previous
    optimizer step's parameters) are evicted, least recently used first. The hit rate thus
    degrades to the fraction of a cycle that fits, not to zero.

    Args:
        max_elements: Most elements held at once; a value larger than this is never kept
            (memory stays bounded at any length).
    """

    # keys remembered as asked for without being held (bounds that bookkeeping)
    MAX_MISSES = 4096

    def __init__(self, max_elements: int = 2**22) -> None:
        self.max_elements = max_elements
        # key -> (positions it was computed for, forward scope or None, value); least recently
        # used first
        self._entries: dict[Hashable, tuple[tuple[Tensor, ...], object | None, T]] = {}
        self._held = 0
        self._clock = 0
        self._used: dict[Hashable, int] = {}  # held key -> when it was last asked for
        self._missed: dict[Hashable, int] = {}  # key not held -> when it was last asked for

    def get(self, key: Hashable, positions: tuple[Tensor, ...], compute: Callable[[], T]) -> T:
        """The value for ``key`` at ``positions``, computed by ``compute()`` when not held."""
        full_key = (
            key,
            torch.is_grad_enabled(),
            torch.is_inference_mode_enabled(),
            tuple((p.shape, p.dtype, p.device) for p in positions),
        )
        self._clock += 1
        scope = _SCOPE.get()
        asked_before = self._used.get(full_key, self._missed.pop(full_key, None))
        hit = self._entries.get(full_key)
        if hit is not None:
            stored, made_in, value = hit
            if (made_in is None or made_in is scope) and all(
                torch.equal(a, b) for a, b in zip(stored, positions, strict=True)
            ):
                self._touch(full_key, hit)
                return value
            self._drop(full_key)
        value = compute()
        tensors = value if isinstance(value, tuple) else (value,)
        size = sum(t.numel() for t in tensors)
        tracked = any(t.requires_grad for t in tensors)
        if size > self.max_elements or (tracked and scope is None):
            return value
        if not self._make_room(size, asked_before):
            self._remember_miss(full_key, self._clock)
            return value
        # Clones: a caller may later change its positions tensor in place.
        kept = tuple(p.detach().clone() for p in positions)
        self._touch(full_key, (kept, scope if tracked else None, value))
        self._held += size
        return value

    def _touch(self, key: Hashable, entry: tuple) -> None:
        self._entries.pop(key, None)
        self._entries[key] = entry  # now the most recently used
        self._used[key] = self._clock

    def _make_room(self, size: int, asked_before: int | None) -> bool:
        """Evicts entries not used since ``asked_before`` (all, if ``None``), least recently
        used first, until ``size`` more elements fit; False (nothing evicted) if they cannot."""
        need = self._held + size - self.max_elements
        if need <= 0:
            return True
        victims, freed = [], 0
        for key in self._entries:  # least recently used first
            if asked_before is not None and self._used[key] > asked_before:
                break  # this one and all after it were used in the current cycle
            victims.append(key)
            freed += _numel(self._entries[key][2])
            if freed >= need:
                for victim in victims:
                    self._drop(victim)
                return True
        return False

    def _drop(self, key: Hashable) -> None:
        _, _, value = self._entries.pop(key)
        self._remember_miss(key, self._used.pop(key))
        self._held -= _numel(value)

    def _remember_miss(self, key: Hashable, when: int) -> None:
        self._missed[key] = when
        if len(self._missed) > self.MAX_MISSES:
            del self._missed[next(iter(self._missed))]

    def clear(self) -> None:
        self._entries.clear()
        self._used.clear()
        self._missed.clear()
        self._held = 0


def _numel(value: Tensor | tuple[Tensor, ...]) -> int:
    return sum(t.numel() for t in (value if isinstance(value, tuple) else (value,)))
