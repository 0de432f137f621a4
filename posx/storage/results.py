"""Run directories and tables, all written atomically.

Every file is written to a temporary sibling and moved into place with ``os.replace``, so a
killed process leaves either the old file or the new one, never half of one. Checkpoints live in
:mod:`posx.storage.checkpoint`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from posx.errors import ConfigError, PosxError, damaged_file, one_line
from posx.storage.atomic import atomic_write, shared_mode

if TYPE_CHECKING:  # pandas is imported where a table is read or merged, not by every command
    import pandas as pd

SCHEMA_VERSION = 1
CHECKPOINT = "checkpoint"


def write_csv(path: Path, frame: pd.DataFrame) -> None:
    """Writes ``frame`` to ``path`` as CSV (no index column), atomically."""
    atomic_write(path, frame.to_csv(index=False))


def write_json(path: Path, obj: Any) -> None:
    """Writes ``obj`` to ``path`` as indented JSON, atomically; values JSON cannot hold
    (paths, ...) are written as their ``str``."""
    atomic_write(path, json.dumps(obj, indent=2, default=str) + "\n")


def load_json_object(path: Path) -> dict[str, Any]:
    """A posx JSON file (``run.json``, ``trainer.json``) as a dict.

    Raises:
        OSError: The file cannot be read.
        ValueError: It is not JSON, not an object, or its ``schema_version`` is no integer.
    """
    data = json.loads(path.read_text())  # JSONDecodeError and UnicodeDecodeError: ValueErrors
    if not isinstance(data, dict):
        raise ValueError(f"a JSON object was expected, found {type(data).__name__}")
    version = data.get("schema_version", 0)
    if isinstance(version, bool) or not isinstance(version, int):
        raise ValueError(f"schema_version is {version!r}, not an integer")
    return data


def read_run_info(run_dir: Path) -> dict[str, Any] | BaseException:
    """``run.json`` read once: the object, or the error that refuses it (:func:`check_run_info`
    raises it), so that a reader that takes what it can and one that refuses damage share one
    read."""
    path = run_dir / "run.json"
    if not path.is_file():
        return ConfigError(f"not a posx run directory (no run.json): {run_dir}")
    try:
        return load_json_object(path)
    except (OSError, ValueError) as err:
        return err


def check_run_info(run_dir: Path, read: dict[str, Any] | BaseException) -> dict[str, Any]:
    """``run.json`` as :func:`read_run_info` read it, once it is known to be whole and of a
    schema this posx reads.

    Raises:
        ConfigError: The run has no ``run.json``.
        PosxError: It is damaged, or written by a newer posx (one line naming it).
    """
    path = run_dir / "run.json"
    if isinstance(read, ConfigError):
        raise read
    if isinstance(read, BaseException):
        raise damaged_file(path, one_line(read)) from read
    info = read
    if info.get("schema_version", 0) > SCHEMA_VERSION:
        raise PosxError(
            f"{path} was written by a newer posx (schema {info['schema_version']} > "
            f"{SCHEMA_VERSION}); upgrade posx"
        )
    return info


def results_root(run_dir: Path) -> Path:
    """The results root above a run: the parent of ``runs/`` or ``sweeps/``, else the run's
    parent directory."""
    for parent in run_dir.resolve().parents:
        if parent.name in ("runs", "sweeps"):
            return parent.parent
    return run_dir.resolve().parent


def check_writable(
    root: Path, what: str = "results root", hint: str = "choose another with root=DIR"
) -> None:
    """Fails before any work when files cannot be created in the directory ``root``.

    Probes the nearest existing ancestor with a real temporary file (permission bits alone
    mislead for root, read-only mounts, ACLs and ``chattr +i``) and creates nothing that stays
    behind.

    Args:
        root: The directory files will be written into (created if missing).
        what: What it is, for the message (``results root``, ``run directory``, ...).
        hint: What the user can do instead.

    Raises:
        ConfigError: One line naming the place and why.
    """
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"{what} {root} cannot be created: {probe} is not a directory; {hint}")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as err:
        raise ConfigError(
            f"{what} is not writable: {root} ({err.strerror or err} in {probe}); {hint}"
        ) from err


def find_runs(root: Path) -> list[Path]:
    """Every run directory (one with ``run.json``) below ``root``, sorted."""
    if not root.is_dir():
        raise ConfigError(f"results root does not exist: {root}")
    return sorted(p.parent for p in root.rglob("run.json") if not p.parent.name.startswith("."))


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Exclusive advisory lock on ``path`` (a sidecar ``.<name>.lock``) for read-modify-write,
    so two ``posx eval`` processes on one run never drop each other's rows.

    The lock file is opened with ``O_NOFOLLOW``: in a shared run directory it could be a
    symbolic link, and following it would create (or open) a file anywhere.

    Raises:
        PosxError: The lock file is a symbolic link or not a regular file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.parent / f".{path.name}.lock"
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(lock, flags, shared_mode())
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
        raise PosxError(
            f"{lock} is a symbolic link; posx never follows links for its lock files: remove it"
        ) from err
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PosxError(f"{lock} is not a regular file; remove it")
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def merge_rows(
    path: Path,
    rows: Iterable[dict[str, Any]],
    keys: list[str],
    replaces: Iterable[dict[str, Any]] = (),
) -> pd.DataFrame:
    """Adds ``rows`` to the CSV at ``path``, replacing earlier rows with the same ``keys``.

    Earlier rows whose ``keys`` match one of ``replaces`` are dropped too (e.g. a length's
    position buckets when its new eval row failed and has no buckets).
    """
    with locked(path):
        # Every writer of `path` holds the lock, so a temporary file of it now is a dead one's.
        for stale in path.parent.glob(f".{path.name}.*.tmp"):
            stale.unlink(missing_ok=True)
        import pandas as pd

        return _merge_rows(path, pd.DataFrame(list(rows)), keys, pd.DataFrame(list(replaces)))


def read_table(path: Path, keys: list[str]) -> pd.DataFrame:
    """A table that rows will be merged into; one that cannot be read, or lacks the ``keys``
    columns (a foreign table), is an error: overwriting it would lose its rows.

    Raises:
        PosxError: One line naming the file and what is wrong.
    """
    import pandas as pd

    try:
        table = pd.read_csv(path, keep_default_na=False, na_values=[""])
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise PosxError(
            f"cannot read {path} ({one_line(err)}); move it aside, then evaluate again"
        ) from err
    missing = [k for k in keys if k not in table]
    if missing:
        raise PosxError(
            f"cannot merge into {path}: it has no {', '.join(missing)} column (not a posx "
            "table?); move it aside, then evaluate again"
        )
    return table


def _merge_rows(
    path: Path, new: pd.DataFrame, keys: list[str], replaces: pd.DataFrame | None = None
) -> pd.DataFrame:
    import pandas as pd

    if path.is_file():
        old = read_table(path, keys)
        key_of = lambda df: df[keys].astype("string").fillna("").agg("|".join, axis=1)  # noqa: E731
        drop = set(key_of(new)) if len(new) else set()
        if replaces is not None and len(replaces):
            drop |= set(key_of(replaces))
        old = old[~key_of(old).isin(drop)]
        new = pd.concat([old, new], ignore_index=True)
    elif not len(new):
        return new
    write_csv(path, new)
    return new
