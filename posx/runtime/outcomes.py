"""Collectives that one process's error cannot hang: every rank sends its result or its error.

Under ``torchrun`` a process that raises between two collectives leaves the others waiting in
the next one for ever (a caught error is worse: the ranks then pair different collectives). So
the work between collectives runs inside :func:`gather_outcomes` or :func:`together`: each
rank reaches the collective with either its result or a :class:`Failure`, and when any rank
failed, every rank raises. The failed rank raises its own error unchanged (as one process
would); the others raise the same kind of error, its message naming the failed rank and its
one-line reason, so each rank's caller handles it as one process handles that error (e.g. a
``RuntimeError`` that RULER turns into a ``failed`` row, a :class:`~posx.errors.ConfigError`
that exits 2).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from posx.errors import PosxError, one_line
from posx.runtime.distributed import World

T = TypeVar("T")


@dataclass(frozen=True)
class Failure:
    """One rank's error, as the other ranks learn of it.

    Attributes:
        rank: The rank that failed.
        kind: Its error's class (rebuilt on the others), or None when it cannot travel.
        reason: The error's first line.
    """

    rank: int
    kind: type[Exception] | None
    reason: str

    @classmethod
    def of(cls, err: Exception, rank: int) -> Failure:
        """``err`` of ``rank``, with its class when the class travels: one importable by its
        module and name, as the collective's pickling of a class requires."""
        kind: type[Exception] | None = type(err)
        module = sys.modules.get(kind.__module__)
        found: Any = module
        for part in kind.__qualname__.split("."):
            found = getattr(found, part, None)
        if found is not kind:  # a class defined in a function: the message alone travels
            kind = None
        return cls(rank, kind, f"{type(err).__name__}: {one_line(err)}"[:300])

    def error(self, size: int) -> Exception:
        """The error another rank raises: the failed rank's kind (a :class:`PosxError` where
        that kind cannot be rebuilt from a message), naming the rank and the reason."""
        message = f"rank {self.rank} of {size} failed: {self.reason}"
        if self.kind is not None:
            try:
                return self.kind(message)
            except Exception:  # a constructor that takes more than a message
                pass
        return PosxError(message)


@dataclass(frozen=True)
class _Done:
    value: Any


def settle(gathered: list[Any], rank: int, size: int) -> list[Any]:
    """The values of ``gathered`` (one :class:`Failure` or result per rank, in rank order), or
    the first failed rank's error raised (:meth:`Failure.error`) when this rank did not fail.

    Raises:
        Exception: Another rank failed (the first one's kind; see :meth:`Failure.error`).
    """
    failed = next((g for g in gathered if isinstance(g, Failure)), None)
    if failed is not None:
        raise failed.error(size)
    return [g.value for g in gathered]


def _exchange(sent: Failure | _Done, w: World) -> list[Any]:
    import torch.distributed as dist

    gathered: list[Any] = [None] * w.size
    dist.all_gather_object(gathered, sent)
    return gathered


def gather_outcomes(work: Callable[[], T], w: World) -> list[T]:
    """Every rank's ``work()``, in rank order, on every rank; an error on any rank raised on
    every rank instead (this rank's own, or the failed rank's named: see the module).

    Args:
        work: This rank's part (its result must pickle).
        w: The processes (a single process runs ``work`` alone).

    Returns:
        One result per rank.
    """
    if not w.distributed:
        return [work()]
    try:
        value = work()
    except Exception as err:
        _exchange(Failure.of(err, w.rank), w)
        raise
    return settle(_exchange(_Done(value), w), w.rank, w.size)


@contextlib.contextmanager
def together(w: World) -> Iterator[None]:
    """Its block runs on every rank, and no rank leaves it while another's block failed: an
    error on any rank is raised on every rank (this rank's own, or the failed rank's named).

    Used for work before a collective that can fail on one rank alone (loading a model on one
    GPU, writing a file on rank 0).
    """
    if not w.distributed:
        yield
        return
    try:
        yield
    except Exception as err:
        _exchange(Failure.of(err, w.rank), w)
        raise
    settle(_exchange(_Done(None), w), w.rank, w.size)


def from_main(work: Callable[[], T], w: World) -> T:
    """Rank 0's ``work()`` on every rank (the others run nothing); rank 0's error raised on
    every rank, named on the others.

    Args:
        work: What rank 0 alone does (its result must pickle).
        w: The processes.

    Returns:
        Rank 0's result.
    """
    return gather_outcomes(work if w.is_main else lambda: None, w)[0]
