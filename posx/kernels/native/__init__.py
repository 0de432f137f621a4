"""C kernels for the CPU, built on first use with the system's C compiler and loaded by ctypes.

Each kernel is one ``<name>.c`` file in this package with a plain C interface (pointers and
integers). :func:`load` compiles it once per machine into a cache directory and returns the
loaded library, or ``None`` wherever that cannot be done (no compiler, a compile error, a
platform without OpenMP, ``POSX_NATIVE=0``): callers then take their PyTorch path, which computes
the same formula (the two differ by float32 rounding, and each kernel's tests hold its error
against a float64 reference to no more than the PyTorch path's). Nothing here is needed for
correctness, only for speed.

- Cache: ``$POSX_NATIVE_CACHE``, else ``$XDG_CACHE_HOME/posx/native``, else
  ``~/.cache/posx/native``. A library's file name carries a hash of its source, the compiler,
  the flags and the CPU, so an edited kernel or another machine sharing the directory builds
  its own; a build is written under a temporary name and renamed into place.
- Compiler: ``$CC``, else ``cc``. Flags: ``-O3 -march=native -fopenmp``, then without
  ``-march=native``, then without OpenMP (one thread), the first that builds.
- OpenMP: the library links ``libgomp.so.1``, which is torch's own runtime once torch is loaded
  (same soname), so the kernel's threads are torch's intra-op threads and do not compete with
  them.
- A cached file that does not load (truncated, another architecture) or lacks the symbols its
  caller needs is reported in one line naming it, removed and rebuilt.
"""

from __future__ import annotations

import _ctypes
import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path

from posx.errors import PosxWarning
from posx.storage.cache import user_cache

log = logging.getLogger(__name__)

ENV_SWITCH = "POSX_NATIVE"  # "0": never build or load (the PyTorch paths run)
ENV_CACHE = "POSX_NATIVE_CACHE"
BASE_FLAGS = ["-O3", "-fPIC", "-shared", "-fno-math-errno", "-fno-trapping-math"]
# tried in order; the first that builds is kept
FLAG_SETS = [
    ["-march=native", "-fopenmp"],
    ["-fopenmp"],
    [],
]
COMPILE_TIMEOUT_S = 120

_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL | None] = {}


def cache_dir() -> Path:
    """Where built libraries are kept (module docstring)."""
    return user_cache("native", ENV_CACHE)


def load(name: str, symbols: tuple[str, ...] = ()) -> ctypes.CDLL | None:
    """The library built from ``<name>.c`` in this package, or ``None`` where it cannot be had.

    Built at most once per process and source (then cached on disk for later processes);
    a failure is logged once, at INFO, and remembered for the process. A cached file that
    does not load, or lacks one of ``symbols``, is damaged: reported, removed and rebuilt.
    """
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return None
    with _lock:
        if name not in _loaded:
            try:
                _loaded[name] = _build_and_load(name, symbols)
            except (OSError, subprocess.SubprocessError, RuntimeError) as err:
                log.info("posx: native kernel %s not available (%s); using PyTorch", name, err)
                _loaded[name] = None
        return _loaded[name]


def _cpu_identity() -> str:
    """Enough of the CPU to tell ``-march=native`` builds apart."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return platform.processor()
    keep = ("model name", "flags", "Features", "CPU part")
    return "\n".join(sorted({ln for ln in text.splitlines() if ln.startswith(keep)}))


def _open(path: Path, symbols: tuple[str, ...]) -> ctypes.CDLL:
    """The library at ``path``; OSError if it does not load or lacks one of ``symbols``."""
    lib = ctypes.CDLL(str(path))
    missing = [sym for sym in symbols if not hasattr(lib, sym)]
    if missing:
        # unloaded, or opening the rebuilt file at this path would return this one again
        dlclose = getattr(_ctypes, "dlclose", None)
        if dlclose is not None:
            dlclose(lib._handle)
        raise OSError(f"it has no {missing[0]}")
    return lib


def _build_and_load(name: str, symbols: tuple[str, ...]) -> ctypes.CDLL:
    source = Path(__file__).with_name(f"{name}.c")
    code = source.read_bytes()
    compiler = shutil.which(os.environ.get("CC") or "cc")
    if compiler is None:
        raise RuntimeError("no C compiler (set CC)")
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    errors = []
    for extra in FLAG_SETS:
        flags = [*BASE_FLAGS, *extra]
        key = hashlib.sha256(
            b"\0".join(
                [code, compiler.encode(), " ".join(flags).encode(), _cpu_identity().encode()]
            )
        ).hexdigest()[:16]
        target = directory / f"{name}-{key}.so"
        if target.exists():
            try:
                return _open(target, symbols)
            except OSError as err:  # damaged: say so, remove, build again below
                problem = " ".join(str(err).split())  # one line
                warnings.warn(
                    f"{target}: not a loadable library ({problem}); rebuilding it",
                    PosxWarning,
                    stacklevel=3,
                )
                target.unlink(missing_ok=True)
        built = _compile(compiler, flags, source, target)
        if isinstance(built, str):
            errors.append(built)
            continue
        return _open(built, symbols)
    raise RuntimeError(f"{compiler} could not build {source.name}: {errors[-1]}")


def _compile(compiler: str, flags: list[str], source: Path, target: Path) -> Path | str:
    """Builds ``source`` into ``target`` (atomically); the path, or the compiler's first line
    of complaint."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.stem}-", suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        done = subprocess.run(
            [compiler, *flags, str(source), "-o", tmp, "-lm"],
            capture_output=True,
            text=True,
            timeout=COMPILE_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            lines = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
            first = next((ln for ln in lines if "error" in ln), lines[0] if lines else "")
            return first.strip() or f"exit status {done.returncode}"
        os.replace(tmp, target)
        return target
    finally:
        Path(tmp).unlink(missing_ok=True)
