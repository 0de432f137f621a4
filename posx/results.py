"""Run directories, checkpoints and tables, all written atomically.

Every file is written to a temporary sibling and moved into place with ``os.replace``, so a
killed process leaves either the old file or the new one, never half of one. Checkpoints are a
directory (safetensors + JSON, no pickle) swapped in as a whole.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from omegaconf import DictConfig, OmegaConf
from safetensors.torch import load_file, load_model, save_file, save_model

from posx.errors import ConfigError, PosxError

SCHEMA_VERSION = 1
CHECKPOINT = "checkpoint"


def atomic_write(path: Path, data: str | bytes) -> None:
    """Writes ``data`` to ``path`` through a temporary file and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_csv(path: Path, frame: pd.DataFrame) -> None:
    atomic_write(path, frame.to_csv(index=False))


def write_json(path: Path, obj: Any) -> None:
    atomic_write(path, json.dumps(obj, indent=2, default=str) + "\n")


# --- checkpoints -------------------------------------------------------------------------


def save_checkpoint(
    run_dir: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
) -> None:
    """Writes ``checkpoint/`` = model.safetensors, optimizer.safetensors, trainer.json.

    The new directory is built beside the old one and swapped in, so a kill at any moment
    leaves one complete checkpoint (``load_checkpoint`` also accepts the swap's leftover).
    """
    final = run_dir / CHECKPOINT
    tmp = Path(tempfile.mkdtemp(dir=run_dir, prefix=".checkpoint."))
    try:
        save_model(model, str(tmp / "model.safetensors"))
        tensors, meta = _flatten_optimizer(optimizer)
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        write_json(
            tmp / "trainer.json", {"schema_version": SCHEMA_VERSION, **state, "optimizer": meta}
        )
        old = run_dir / f".{CHECKPOINT}.old"
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _flatten_optimizer(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], Any]:
    sd = optimizer.state_dict()
    tensors, scalars = {}, {}
    for pid, slots in sd["state"].items():
        for name, value in slots.items():
            if torch.is_tensor(value):
                tensors[f"{pid}.{name}"] = value.detach().contiguous().cpu()
            else:
                scalars[f"{pid}.{name}"] = value
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def checkpoint_dir(run_dir: Path) -> Path:
    """The run's complete checkpoint directory; an error naming the run when there is none."""
    for name in (CHECKPOINT, f".{CHECKPOINT}.old"):
        path = run_dir / name
        if (path / "trainer.json").is_file() and (path / "model.safetensors").is_file():
            return path
    raise PosxError(f"run has no checkpoint: {run_dir} (train it first, or pick another run)")


def load_checkpoint(
    run_dir: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None
) -> dict[str, Any]:
    """Loads weights (and optimizer state) into the given objects; returns the trainer state."""
    path = checkpoint_dir(run_dir)
    try:
        state = json.loads((path / "trainer.json").read_text())
        missing, unexpected = load_model(model, str(path / "model.safetensors"), strict=False)
    except (OSError, ValueError, RuntimeError) as err:
        raise PosxError(
            f"checkpoint in {run_dir} is unreadable or does not fit the model: {err}"
        ) from err
    if missing or unexpected:
        raise PosxError(
            f"checkpoint in {run_dir} does not fit its config: missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(unexpected)[:3]}"
        )
    if optimizer is not None:
        tensors = load_file(str(path / "optimizer.safetensors"))
        meta = state["optimizer"]
        slots: dict[int, dict[str, Any]] = {}
        for key, value in {**tensors, **meta["scalars"]}.items():
            pid, name = key.split(".", 1)
            slots.setdefault(int(pid), {})[name] = value
        optimizer.load_state_dict({"state": slots, "param_groups": meta["param_groups"]})
    return state


# --- run directories -----------------------------------------------------------------------


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
        raise PosxError(f"{path} was written by a newer posx (schema {info['schema_version']})")
    return info


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


def merge_rows(path: Path, rows: Iterable[dict[str, Any]], keys: list[str]) -> pd.DataFrame:
    """Adds ``rows`` to the CSV at ``path``, replacing earlier rows with the same ``keys``."""
    with locked(path):
        return _merge_rows(path, pd.DataFrame(list(rows)), keys)


def _merge_rows(path: Path, new: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    if path.is_file():
        old = pd.read_csv(path, keep_default_na=False, na_values=[""])
        key_of = lambda df: df[keys].astype("string").fillna("").agg("|".join, axis=1)  # noqa: E731
        old = old[~key_of(old).isin(set(key_of(new)))]
        new = pd.concat([old, new], ignore_index=True)
    write_csv(path, new)
    return new


def load_evals(root: Path) -> pd.DataFrame:
    """All ``eval.csv`` rows below ``root`` in one frame; an error when there are none."""
    frames = []
    for run in find_runs(root):
        path = run / "eval.csv"
        if path.is_file():
            frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
            version = frame["schema_version"].max() if "schema_version" in frame else None
            if version is None or version > SCHEMA_VERSION:
                raise PosxError(f"{path} has an unknown schema version ({version}); upgrade posx")
            frames.append(frame)
    if not frames:
        raise ConfigError(f"no eval.csv found under {root}; run `posx train` or `posx eval` first")
    return pd.concat(frames, ignore_index=True)
