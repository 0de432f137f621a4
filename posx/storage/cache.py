"""Where posx keeps what it can rebuild (built kernels, model-directory hashes): one folder per
kind under the user's cache, each movable by its own environment variable."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache(kind: str, env: str) -> Path:
    """``$ENV`` when set, else ``$XDG_CACHE_HOME/posx/KIND``, else ``~/.cache/posx/KIND``."""
    if os.environ.get(env):
        return Path(os.environ[env])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "posx" / kind
