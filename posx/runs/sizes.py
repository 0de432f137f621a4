"""Sizes in bytes, read and written as people do, and the memory a CPU process has free: plain
Python (no torch), so a plan made from a model's files alone (``posx extend hf:DIR --dry-run``)
says its memory before torch is imported. :mod:`posx.runs.resources` builds on these."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from posx.errors import ConfigError

# a pretrained model's process beyond its estimate: allocator slack, kernels' workspace, the
# tokenized text
PRETRAINED_RUNTIME = 512 * 2**20
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_size(text: str | int | None, what: str) -> int | None:
    """``12G``, ``512MiB``, ``1.5GB`` or a number of bytes -> bytes (binary units); None stays.

    Raises:
        ConfigError: Anything else.
    """
    if text is None or text == "":
        return None
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", str(text), re.IGNORECASE)
    if not found or float(found[1]) <= 0:
        raise ConfigError(f"{what} must be a size such as 8G, 512M or 1.5T, got {text!r}")
    return int(float(found[1]) * _UNITS[found[2].lower()])


def gib(n: int) -> str:
    """Bytes for people: ``152.7 MiB``, ``21.0 GiB``, ``346.8 TiB``."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n / 2**20:.1f} MiB"


def cpu_room() -> tuple[int, str] | None:
    """Memory free for this process on the CPU (the smaller of the system's available memory
    and what the cgroup's limit leaves), and how to say it; None when it cannot be told."""
    found = []
    with contextlib.suppress(OSError, ValueError, TypeError):
        meminfo = Path("/proc/meminfo").read_text()
        free = int(re.search(r"MemAvailable:\s+(\d+)", meminfo)[1]) * 1024
        found.append((free, f"the {gib(free)} available"))
    room = _cgroup_room()
    if room is not None:
        found.append((room, f"the {gib(room)} left under this cgroup's memory limit"))
    return min(found) if found else None


def _cgroup_room() -> int | None:
    """Bytes left under the cgroup's memory limit (v2, else v1), or None without a limit."""
    v1 = "/sys/fs/cgroup/memory/memory."
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (v1 + "limit_in_bytes", v1 + "usage_in_bytes"),
    ):
        with contextlib.suppress(OSError, ValueError):
            limit = Path(limit_file).read_text().strip()
            if limit == "max" or int(limit) >= 2**60:  # v1 writes a huge number for "none"
                return None
            return max(0, int(limit) - int(Path(usage_file).read_text()))
    return None
