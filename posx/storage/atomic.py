"""Atomic file writes, at the bottom of the layers so that every layer (tasks' tokenizer cache
included) writes files the same way: a killed process leaves the old file or the new one, never
half of one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def umask() -> int:
    """The process's file-mode creation mask, read now (a notebook may change it). Linux shows
    it in /proc; elsewhere it is read by setting it, which briefly changes it for every thread."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def shared_mode(directory: bool = False) -> int:
    """The mode ``open()`` or ``mkdir()`` would give: 0o666 (0o777 for a directory) less the
    umask. ``mkstemp``/``mkdtemp`` make 0600/0700, which would lock colleagues out of results
    they share."""
    return (0o777 if directory else 0o666) & ~umask()


def atomic_write(path: Path, data: str | bytes) -> None:
    """Writes ``data`` to ``path`` through a temporary file and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, shared_mode())
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
