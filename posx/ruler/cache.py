"""Generated samples kept on disk, so a second evaluation with the same tokenizer, task,
length, seed and sample count reads them instead of searching haystack sizes again.

One JSON file per key (``<dir>/<task>_L<length>_<16 hex of the key>.json``), written
atomically by the caller's writer. A file that cannot be read back as what was written
(damaged, edited, another key) is reported and rebuilt, never trusted.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from posx.ruler.build import Fitted
from posx.ruler.sample import Sample

VERSION = 1  # part of every key: raise it when a generator or the word lists change


def cache_key(fields: dict[str, Any]) -> str:
    """A 16-hex digest of what identifies a set of samples (tokenizer, task, length, seed, ...)."""
    text = json.dumps({"version": VERSION, **fields}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_path(directory: Path, name: str, length: int, key: str) -> Path:
    """Where the samples of ``key`` are kept."""
    return directory / f"{name}_L{length}_{key}.json"


def dump(key: str, samples: list[Fitted]) -> str:
    """The file's text for ``samples``."""
    rows = [
        {
            "input": f.sample.input,
            "answer_prefix": f.sample.answer_prefix,
            "outputs": list(f.sample.outputs),
            "depth": f.sample.depth,
            "size": f.sample.size,
            "needle_depths": list(f.sample.needle_depths),
            "tokens": f.tokens,
        }
        for f in samples
    ]
    return json.dumps({"version": VERSION, "key": key, "samples": rows})


def load(path: Path, key: str, count: int) -> list[Fitted]:
    """The samples kept in ``path``.

    Raises:
        ValueError: The file is damaged or holds another key (the message names the problem).
        OSError: It cannot be read.
    """
    try:
        data = json.loads(path.read_text("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"not JSON ({err.__class__.__name__})") from err
    if not isinstance(data, dict) or data.get("version") != VERSION or data.get("key") != key:
        raise ValueError("written by another version or for another key")
    rows = data.get("samples")
    if not isinstance(rows, list) or len(rows) != count:
        raise ValueError(f"{count} samples expected")
    try:
        return [_fitted(r) for r in rows]
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"a damaged sample ({err.__class__.__name__})") from err


def _fitted(row: dict[str, Any]) -> Fitted:
    strings = (row["input"], row["answer_prefix"], *row["outputs"])
    if not all(isinstance(s, str) for s in strings) or not row["outputs"]:
        raise TypeError("text fields")
    depth = row["depth"]
    numbers = (row["size"], row["tokens"], *row["needle_depths"], 0 if depth is None else depth)
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers):
        raise TypeError("number fields")
    sample = Sample(
        row["input"], row["answer_prefix"], tuple(row["outputs"]), depth, row["size"],
        tuple(row["needle_depths"]),
    )  # fmt: skip
    return Fitted(sample, row["tokens"])
