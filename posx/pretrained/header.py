"""What a model's ``*.safetensors`` files hold, read from their headers alone (no torch, no
weights): each tensor's name, dtype and shape. A safetensors file is an 8-byte little-endian
header length, a JSON header ``{name: {dtype, shape, data_offsets}}`` and the tensors' bytes;
a sharded model names its files in ``model.safetensors.index.json``'s ``weight_map``.

Anything read may be damaged: a file whose header cannot be what it says is named in one line.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posx.errors import ConfigError, one_line

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
# bits per element of the dtypes the format names (a dtype newer than these is taken as
# written: its tensors' sizes go unchecked, never refused)
ITEM_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "F4": 4,
             "F6_E2M3": 6, "F6_E3M2": 6, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
             "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64,
             "C64": 64}  # fmt: skip
MAX_HEADER = 100 * 2**20  # the format's own limit on a header


@dataclass(frozen=True)
class Tensor:
    """One tensor of a weights file: its dtype (``BF16``) and shape."""

    dtype: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        """Elements."""
        return math.prod(self.shape)


def read_header(file: Path) -> dict[str, Tensor]:
    """The tensors ``file``'s header describes, by name.

    Raises:
        ConfigError: One line naming the file: unreadable, a header longer than the file, not a
            JSON object, a tensor without a dtype, or one whose bytes lie outside the file or
            do not match its shape.
    """

    def damaged(why: str) -> ConfigError:
        return ConfigError(f"{file} is damaged ({why}); save the model again")

    try:
        with open(file, "rb") as f:
            size = file.stat().st_size
            start = f.read(8)
            if len(start) < 8:
                raise damaged("shorter than a safetensors header")
            (length,) = struct.unpack("<Q", start)
            if length > MAX_HEADER or 8 + length > size:
                raise damaged(f"its header says {length} bytes; the file holds {size}")
            raw = json.loads(f.read(length))
    except (OSError, ValueError) as err:
        raise damaged(f"its header is not JSON: {one_line(err)}") from err
    if not isinstance(raw, dict):
        raise damaged("its header is not a JSON object")
    data = size - 8 - length
    tensors = {}
    for name, entry in raw.items():
        if name == "__metadata__":
            continue
        tensors[name] = _tensor(name, entry, data, damaged)
    return tensors


def _tensor(name: str, entry: Any, data: int, damaged: Any) -> Tensor:
    """One header entry checked: a known dtype, a shape of naturals, offsets inside the file
    spanning exactly the shape's bytes."""
    if not isinstance(entry, dict):
        raise damaged(f"tensor {name!r} is not described")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or not dtype:
        raise damaged(f"tensor {name!r} has dtype {dtype!r}")
    if not _naturals(shape) or not (_naturals(offsets) and len(offsets) == 2):
        raise damaged(f"tensor {name!r} has no valid shape and offsets")
    begin, end = offsets
    bits = ITEM_BITS.get(dtype)
    if not 0 <= begin <= end <= data or (bits and 8 * (end - begin) != math.prod(shape) * bits):
        raise damaged(f"tensor {name!r} does not lie where its header says")
    return Tensor(dtype, tuple(shape))


def _naturals(values: Any) -> bool:
    return isinstance(values, list) and all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in values
    )


def weight_files(path: Path) -> list[Path] | None:
    """The safetensors files of the model saved in ``path``: the index's shards, else
    ``model.safetensors``; None when it has neither (no weights, or only pickled ones).

    Raises:
        ConfigError: A damaged index, in one line naming it.
    """
    index = path / INDEX
    if index.is_file():
        try:
            raw = json.loads(index.read_text())
        except (OSError, ValueError) as err:
            raise ConfigError(f"{index} is damaged ({one_line(err)})") from err
        shards = raw.get("weight_map") if isinstance(raw, dict) else None
        if not isinstance(shards, dict) or not all(isinstance(v, str) for v in shards.values()):
            raise ConfigError(f"{index} is damaged (no weight_map of tensor names to files)")
        files = [path / name for name in sorted(set(shards.values()))]
        missing = next((f for f in files if not f.is_file()), None)
        if missing is not None:
            raise ConfigError(f"{index} names {missing.name}, which is not in {path}")
        return files
    return [path / SINGLE] if (path / SINGLE).is_file() else None


def read_tensors(path: Path) -> dict[str, Tensor] | None:
    """Every tensor of the model saved in ``path`` (:func:`weight_files`), or None when it
    has no safetensors weights.

    Raises:
        ConfigError: A damaged header or index, in one line naming the file.
    """
    files = weight_files(path)
    if files is None:
        return None
    tensors: dict[str, Tensor] = {}
    for file in files:
        tensors.update(read_header(file))
    return tensors
