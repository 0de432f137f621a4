"""Peak memory of one evaluation length, on CPU (process RSS) or CUDA (allocator).

Both numbers are taken per length: before a length starts, Python garbage and the C allocator's
free pages are released and the peak counter is reset, so a length's peak does not inherit the
peak of the length before it.

- ``peak_mb``: the largest memory in use while the length ran. CPU: the process's resident set
  (``VmHWM`` after resetting it through ``/proc/self/clear_refs``; elsewhere sampled). CUDA:
  ``torch.cuda.max_memory_allocated`` (tensors only, not the allocator's cache).
- ``delta_mb``: ``peak_mb`` minus what was in use just before the length started (the model,
  the data, the interpreter): the memory the length itself needed.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import torch

MIB = 2**20


def rss_mb() -> float:
    """Current resident set size in MiB (Linux ``/proc``; elsewhere the lifetime peak)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MIB
    except OSError:
        import resource

        scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / MIB


def release_free_memory() -> None:
    """Collects garbage and hands the C heap's free pages back to the OS (glibc only)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: RSS may keep freed pages
        ctypes.CDLL("libc.so.6").malloc_trim(0)


@contextlib.contextmanager
def heap_frozen() -> Iterator[None]:
    """Within the block, what was alive when it started is out of the cyclic collector's sight.

    Each evaluated length collects garbage first (:class:`PeakMemory`), and a full collection
    walks every tracked object: ~300k once torch is imported, 0.1-0.4 s each on a 2-core
    machine. A sweep's objects from before its first length (modules, the model, the data) are
    collected here once and frozen (:func:`gc.freeze`), so each length's collection walks only
    what the sweep made; they are unfrozen when the block ends. A heap someone froze already
    (the test suite does, per module) is left as it is.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def reset_peak_rss() -> bool:
    """Resets the kernel's peak-RSS counter (``VmHWM``); False where that is not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    """The kernel's peak RSS (``VmHWM``) in MiB since the last reset."""
    match = re.search(r"VmHWM:\s+(\d+)\s+kB", Path("/proc/self/status").read_text())
    if match is None:
        raise OSError("no VmHWM in /proc/self/status")
    return int(match.group(1)) / 1024


class PeakMemory:
    """Peak memory in MiB while a ``with`` block runs (see the module docstring).

    Attributes:
        base_mb: Memory in use when the block started.
        peak_mb: Largest memory in use during the block.
        delta_mb: ``peak_mb - base_mb``.
    """

    def __init__(self, device: torch.device, interval: float = 0.002) -> None:
        self.device, self.interval = device, interval
        self.base_mb = self.peak_mb = float("nan")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._kernel_peak = False

    @property
    def delta_mb(self) -> float:
        return self.peak_mb - self.base_mb

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak_mb = max(self.peak_mb, rss_mb())

    def __enter__(self) -> PeakMemory:
        release_free_memory()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base_mb = torch.cuda.memory_allocated(self.device) / MIB
            return self
        self.base_mb = self.peak_mb = rss_mb()
        self._kernel_peak = reset_peak_rss()
        if not self._kernel_peak:  # no resettable kernel counter: sample RSS in a thread
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_mb = torch.cuda.max_memory_allocated(self.device) / MIB
            return
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        if self._kernel_peak:
            self.peak_mb = max(self.base_mb, peak_rss_mb())
        self.peak_mb = max(self.peak_mb, rss_mb())
