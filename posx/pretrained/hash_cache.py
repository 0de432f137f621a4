"""The SHA-256 of a model directory, remembered between processes.

A local model's run is named by the hash of every file it holds (:func:`posx.pretrained.load.
directory_hash`): about a second per GB of weights, so ``posx extend hf:DIR --dry-run`` of a 7B
model spent 12 s reading what the last run had already read. The hash is kept in the user's
cache (``$POSX_HASH_CACHE``, else ``$XDG_CACHE_HOME/posx/model-hashes``, else
``~/.cache/posx/model-hashes``), one small JSON file per directory, with the name, size and
modification time of each file it covered: any of them changed, and the directory is read again
(as ``make`` and git's index trust a file's stat). A damaged entry is named in one warning line
and replaced; a cache that cannot be written is skipped without a word (it only saves time).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

from posx.errors import PosxWarning, one_line
from posx.storage.atomic import atomic_write
from posx.storage.cache import user_cache

ENV_CACHE = "POSX_HASH_CACHE"
Stamp = tuple[tuple[str, int, int], ...]  # (relative name, size, mtime_ns) per file


def cache_dir() -> Path:
    """Where directory hashes are kept."""
    return user_cache("model-hashes", ENV_CACHE)


def _entry(path: Path) -> Path:
    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:32]
    return cache_dir() / f"{key}.json"


def _as_stamp(value: object) -> Stamp:
    """A stamp read back from JSON; ValueError when it is not one."""
    if not isinstance(value, list):
        raise ValueError("'files' is not a list")
    out = []
    for item in value:
        ok = isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
        if not ok or not all(isinstance(n, int) and not isinstance(n, bool) for n in item[1:]):
            raise ValueError(f"'files' holds {str(item)[:60]!r}, not [name, size, mtime_ns]")
        out.append((item[0], item[1], item[2]))
    return tuple(out)


def remembered(path: Path, stamp: Stamp) -> str | None:
    """The hash recorded for directory ``path`` when its files are still ``stamp``."""
    entry = _entry(path)
    try:
        text = entry.read_text()
    except OSError:
        return None
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        digest = data.get("sha256")
        if not (
            isinstance(digest, str) and len(digest) == 64 and set(digest) <= set("0123456789abcdef")
        ):
            raise ValueError("'sha256' is not a hex SHA-256")
        if data.get("dir") != str(path.resolve()):
            raise ValueError(f"it is for {str(data.get('dir'))[:80]!r}")
        files = _as_stamp(data.get("files"))
    except ValueError as err:  # json.JSONDecodeError is one
        warnings.warn(
            f"{entry}: damaged model-hash cache entry ({one_line(err)}); reading the "
            "directory again",
            PosxWarning,
            stacklevel=3,
        )
        return None
    return digest if files == stamp else None


def remember(path: Path, stamp: Stamp, digest: str) -> None:
    """Records ``digest`` for directory ``path`` with files ``stamp`` (best effort)."""
    record = {"dir": str(path.resolve()), "sha256": digest, "files": [list(s) for s in stamp]}
    try:
        entry = _entry(path)
        entry.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(entry, json.dumps(record) + "\n")
    except OSError:
        return
