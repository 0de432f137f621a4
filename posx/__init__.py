"""posx: does this positional encoding still work past the length it was trained on?

``posx.compose``, ``posx.train``, ``posx.evaluate``, ``posx.load_results`` and ``posx.report``
(:mod:`posx.api`) are loaded on first use, so that ``import posx`` stays light and does nothing
else.
"""

from __future__ import annotations

from typing import Any

from posx.version import __version__ as __version__

API = ("compose", "train", "evaluate", "load_results", "report")


def __getattr__(name: str) -> Any:
    """``posx.compose`` etc.: :mod:`posx.api`'s functions, imported when first asked for."""
    if name in API:
        from posx import api

        return getattr(api, name)
    raise AttributeError(f"module 'posx' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *API])
