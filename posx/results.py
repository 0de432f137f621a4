"""Run directories and tables, all written atomically.

Every file is written to a temporary sibling and moved into place with ``os.replace``, so a
killed process leaves either the old file or the new one, never half of one. Checkpoints live in
:mod:`posx.checkpoint`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from posx.atomic import atomic_write
from posx.errors import ConfigError, PosxError, one_line

SCHEMA_VERSION = 1
CHECKPOINT = "checkpoint"


def write_csv(path: Path, frame: pd.DataFrame) -> None:
    atomic_write(path, frame.to_csv(index=False))


def write_json(path: Path, obj: Any) -> None:
    atomic_write(path, json.dumps(obj, indent=2, default=str) + "\n")


def run_config(run_dir: Path) -> DictConfig:
    """The resolved config Hydra saved for the run."""
    path = run_dir / ".hydra" / "config.yaml"
    if not run_dir.is_dir():
        raise ConfigError(f"run directory does not exist: {run_dir}")
    if not path.is_file():
        raise ConfigError(f"not a posx run directory (no .hydra/config.yaml): {run_dir}")
    cfg = OmegaConf.load(path)
    assert isinstance(cfg, DictConfig)
    return cfg


def run_info(run_dir: Path) -> dict[str, Any]:
    """``run.json``: the run's name, encoding, task, seed and lengths."""
    path = run_dir / "run.json"
    if not path.is_file():
        raise ConfigError(f"not a posx run directory (no run.json): {run_dir}")
    info = json.loads(path.read_text())
    if info.get("schema_version", 0) > SCHEMA_VERSION:
        raise PosxError(
            f"{path} was written by a newer posx (schema {info['schema_version']} > "
            f"{SCHEMA_VERSION}); upgrade posx"
        )
    return info


def check_writable(root: Path) -> None:
    """Fails before any training when files cannot be created under ``root``.

    Probes the nearest existing ancestor with a real temporary file (permission bits alone
    mislead for root, read-only mounts and ACLs) and creates nothing that stays behind.
    """
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"results root {root} cannot be created: {probe} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as err:
        raise ConfigError(
            f"results root is not writable: {root} ({err.strerror or err} in {probe}); "
            "choose another with root=DIR"
        ) from err


def find_runs(root: Path) -> list[Path]:
    """Every run directory (one with ``run.json``) below ``root``, sorted."""
    if not root.is_dir():
        raise ConfigError(f"results root does not exist: {root}")
    return sorted(p.parent for p in root.rglob("run.json") if not p.parent.name.startswith("."))


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Exclusive advisory lock on ``path`` (a sidecar ``.<name>.lock``) for read-modify-write,
    so two ``posx eval`` processes on one run never drop each other's rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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
        return _merge_rows(path, pd.DataFrame(list(rows)), keys, pd.DataFrame(list(replaces)))


def _merge_rows(
    path: Path, new: pd.DataFrame, keys: list[str], replaces: pd.DataFrame | None = None
) -> pd.DataFrame:
    if path.is_file():
        try:
            old = pd.read_csv(path, keep_default_na=False, na_values=[""])
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
            # Never overwrite a table we cannot read: its rows would be lost.
            raise PosxError(
                f"cannot read {path} ({one_line(err)}); move it aside, then evaluate again"
            ) from err
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
