"""Tasks: synthetic reasoning tasks and byte-level text.

``Batch`` and ``Task`` are imported when first used: a module of this package that needs no
torch (:mod:`posx.tasks.corpora`'s names) is read without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from posx.tasks.base import Batch, Task

__all__ = ["Batch", "Task"]


def __getattr__(name: str) -> Any:
    """``posx.tasks.Batch`` and ``posx.tasks.Task`` from :mod:`posx.tasks.base`."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from posx.tasks import base

    return getattr(base, name)
