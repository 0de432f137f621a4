"""Held-out eval sets cached on disk, so every run evaluated at a length reads the same tokens.

A set is keyed by the task (its config and what it reports about its data, e.g. a corpus
checksum), the length, the number of sequences and the seed. Files live under
``<results root>/.eval_cache/`` as safetensors (no pickle), written atomically; an unreadable
or mismatched file is rebuilt from the task.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load, save

from posx.storage.results import atomic_write
from posx.tasks.base import Batch, Task

CACHE_DIR = ".eval_cache"
# 2: text eval sets are full windows of L tokens over the held-out split (version 1 cut BPE
# windows from n·L held-out bytes, so they held fewer tokens than their length).
CACHE_VERSION = 2


def cache_key(task_cfg: Any, task: Task, length: int, sequences: int, seed: int) -> str:
    """A stable hex digest of what determines an eval set's tokens."""
    ident = {
        "v": CACHE_VERSION,
        "task": task_cfg,
        "data": task.describe(),
        "length": length,
        "sequences": sequences,
        "seed": seed,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()


def _read(path: Path, length: int) -> Batch | None:
    try:
        t = load(path.read_bytes())
        batch = Batch(t["inputs"], t["targets"], t["mask"])
    except (OSError, KeyError, SafetensorError):
        return None
    shapes = {batch.inputs.shape, batch.targets.shape, batch.mask.shape}
    if len(shapes) != 1 or batch.inputs.dim() != 2 or batch.inputs.shape[1] != length:
        return None
    return batch


def eval_set(
    task: Task,
    length: int,
    sequences: int,
    seed: int,
    cache_dir: Path | None = None,
    task_cfg: Any = None,
) -> Batch:
    """``task.eval_set(length, sequences, seed)``, read from / written to ``cache_dir``.

    Args:
        task: The task that makes the set.
        length: Tokens per sequence.
        sequences: Sequences asked for (a text task may return fewer).
        seed: Eval seed.
        cache_dir: Cache directory, or ``None`` for no cache.
        task_cfg: The task's config as plain data (part of the key).

    Returns:
        The eval set, ``[n, length]`` tensors on the CPU.
    """
    if cache_dir is None:
        return task.eval_set(length, sequences, seed)
    key = cache_key(task_cfg, task, length, sequences, seed)
    path = cache_dir / f"L{length}_n{sequences}_s{seed}_{key[:16]}.safetensors"
    cached = _read(path, task.tokens_for(length)) if path.is_file() else None
    if cached is not None:
        return cached
    batch = task.eval_set(length, sequences, seed)
    # Own copies: a task may return views of one tensor (text: inputs and targets are shifted
    # slices of one window; with a single sequence both are contiguous views of shared
    # memory), and safetensors refuses to save tensors that share memory.
    tensors = {
        "inputs": batch.inputs.contiguous().clone(),
        "targets": batch.targets.contiguous().clone(),
        "mask": batch.mask.to(torch.bool).contiguous().clone(),
    }
    atomic_write(path, save(tensors, metadata={"key": key, "length": str(length)}))
    return batch
