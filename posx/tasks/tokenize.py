"""Tokenizers for text tasks: bytes, or a byte-level BPE trained locally with HF ``tokenizers``
(extra ``bpe``) or read from a ``tokenizer.json``.

Every token of a byte-level BPE stands for a fixed string of bytes (its characters, read in
GPT-2's byte alphabet), so the bytes a token covers are a table lookup, any bytes (valid UTF-8 or
not) are encoded losslessly, and bits per byte are exact. Encoding checks this: a tokenizer that
does not reproduce the text byte for byte (a normalizer, an added prefix space) is an error.

A trained tokenizer and the token ids of a training split are cached in ``cache_dir`` (written
atomically), keyed by the SHA-256 of the training bytes and the settings; an unreadable file is
rebuilt. BPE training is deterministic, so a missing cache only costs time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load, save
from torch import Tensor

from posx.errors import ConfigError, one_line
from posx.storage.atomic import atomic_write

CACHE_VERSION = 1
CHUNK = 1 << 16  # bytes per piece handed to the tokenizer (cut after a newline where possible)
MAX_VOCAB = 1 << 24


def byte_alphabet() -> dict[str, int]:
    """GPT-2's byte alphabet: the printable character that stands for each byte -> the byte."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    others = [b for b in range(256) if b not in printable]
    chars = printable + [256 + i for i in range(len(others))]
    return {chr(c): b for c, b in zip(chars, printable + others, strict=True)}


def text_pieces(data: bytes) -> Iterator[str | bytes]:
    """``data`` in order as UTF-8 text pieces of about ``CHUNK`` bytes and runs of bytes that are
    not UTF-8 (which the caller encodes byte by byte)."""
    start = 0
    while start < len(data):
        end = min(start + CHUNK, len(data))
        newline = data.rfind(b"\n", start, end) if end < len(data) else -1
        end = newline + 1 if newline >= start else end
        chunk = data[start:end]
        while chunk:
            try:
                yield chunk.decode("utf-8")
                break
            except UnicodeDecodeError as err:
                if err.start:
                    yield chunk[: err.start].decode("utf-8")
                yield chunk[err.start : err.end]
                chunk = chunk[err.end :]
        start = end


def sha256(data: bytes | str) -> str:
    """The SHA-256 hex digest of ``data`` (a ``str`` is hashed as UTF-8); keys the caches."""
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


class ByteTokenizer:
    """One token per byte (vocab 256): the ids are the bytes."""

    vocab_size = 256
    unit = "bytes"

    def __init__(self) -> None:
        self.lengths = torch.ones(256, dtype=torch.int64)  # bytes each token stands for
        self.byte_ids = list(range(256))  # token id of each single byte

    def encode(self, data: bytes, cache_dir: Path | None = None) -> Tensor:
        """``uint8 [n]``: the bytes themselves (no copy worth caching)."""
        if not data:  # torch.frombuffer refuses an empty buffer
            return torch.zeros(0, dtype=torch.uint8)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8)

    def describe(self, bytes_per_token: float) -> dict[str, object]:
        return {"tokenizer": "byte", "length_mapping": "length = bytes of context"}


def require_tokenizers() -> ModuleType:
    """The HF ``tokenizers`` module, imported on demand.

    Raises:
        ConfigError: The library is not installed (extra ``bpe``).
    """
    try:
        import tokenizers
    except ImportError as err:
        raise ConfigError(
            "task.tokenizer=bpe needs the tokenizers library: pip install 'posx[bpe]'"
        ) from err
    return tokenizers


class ByteBPE:
    """A byte-level BPE ``tokenizers.Tokenizer`` and the bytes each of its tokens stands for.

    Args:
        tokenizer: A ``tokenizers.Tokenizer`` whose tokens are strings in GPT-2's byte alphabet
            (or added tokens), with no normalizer.
        origin: Where it came from, for error messages.
    """

    unit = "tokens"

    def __init__(self, tokenizer: Any, origin: str) -> None:
        if tokenizer.normalizer is not None:
            raise ConfigError(f"{origin} has a normalizer, which changes the text; use one without")
        alphabet = byte_alphabet()
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        added = {t.content for t in tokenizer.get_added_tokens_decoder().values()}
        self.table = [b""] * (max(vocab.values()) + 1)
        for token, i in vocab.items():
            if token in added:
                self.table[i] = token.encode()
            elif all(c in alphabet for c in token):
                self.table[i] = bytes(alphabet[c] for c in token)
            else:
                raise ConfigError(
                    f"{origin} is not a byte-level BPE (token {token!r} is not in GPT-2's byte "
                    "alphabet); posx needs one to count bytes exactly"
                )
        missing = [b for c, b in alphabet.items() if c not in vocab]
        if missing:
            raise ConfigError(
                f"{origin} is not a byte-level BPE (no token for the byte {min(missing):#04x}); "
                "posx needs one to count bytes exactly"
            )
        self.tokenizer, self.origin = tokenizer, origin
        self.vocab_size = len(self.table)
        self.lengths = torch.tensor([len(b) for b in self.table], dtype=torch.int64)
        self.byte_ids = [vocab[c] for c in sorted(alphabet, key=alphabet.__getitem__)]
        self.sha256 = sha256(tokenizer.to_str())

    @classmethod
    def train(cls, data: bytes, vocab_size: int, cache_dir: Path | None = None) -> ByteBPE:
        """A BPE of ``vocab_size`` tokens (fewer if ``data`` runs out of pairs) trained on
        ``data``: GPT-2's pre-tokenizer, all 256 bytes in the vocabulary, no special tokens."""
        if not 256 < vocab_size <= MAX_VOCAB:
            raise ConfigError(
                f"task.vocab_size must be in (256, {MAX_VOCAB}] (256 single bytes + merges), "
                f"got {vocab_size}"
            )
        tk = require_tokenizers()
        settings = {"v": CACHE_VERSION, "data": sha256(data), "vocab_size": vocab_size}
        key = sha256(json.dumps(settings, sort_keys=True))[:16]
        path = cache_dir / f"bpe{vocab_size}_{key}.json" if cache_dir else None
        if path is not None and path.is_file():
            try:
                return cls(tk.Tokenizer.from_str(path.read_text()), f"cached tokenizer {path}")
            except Exception:  # the Rust side raises plain Exception; unreadable: train again
                pass
        tokenizer = tk.Tokenizer(tk.models.BPE())
        tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = tk.decoders.ByteLevel()
        trainer = tk.trainers.BpeTrainer(
            vocab_size=vocab_size,
            initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
            special_tokens=[],
        )
        texts = (p for p in text_pieces(data) if isinstance(p, str))
        tokenizer.train_from_iterator(texts, trainer=trainer)
        if path is not None:
            atomic_write(path, tokenizer.to_str())
        return cls(tokenizer, "the trained tokenizer")

    @classmethod
    def from_file(cls, path: str) -> ByteBPE:
        """The tokenizer saved at ``path`` (a ``tokenizer.json``)."""
        tk = require_tokenizers()
        file = Path(path).expanduser()
        if not file.is_file():
            raise ConfigError(f"task.tokenizer_file does not exist: {path}")
        try:
            tokenizer = tk.Tokenizer.from_file(str(file))
        except Exception as err:  # the Rust side raises plain Exception
            raise ConfigError(f"cannot read task.tokenizer_file {path}: {one_line(err)}") from err
        return cls(tokenizer, f"task.tokenizer_file {path}")

    def encode(self, data: bytes, cache_dir: Path | None = None) -> Tensor:
        """``int32 [n]`` token ids of ``data``, checked to decode to ``data`` exactly; read from
        or written to ``cache_dir`` when given."""
        key = sha256(f"{CACHE_VERSION} {self.sha256} {sha256(data)}")[:16]
        path = cache_dir / f"ids_{key}.safetensors" if cache_dir else None
        if path is not None and path.is_file():
            try:
                ids = load(path.read_bytes())["ids"]
                if ids.dtype == torch.int32 and int(self.lengths[ids.long()].sum()) == len(data):
                    return ids
            except (OSError, KeyError, IndexError, SafetensorError):
                pass  # unreadable or stale: encode again
        pieces = list(text_pieces(data))
        texts = [p for p in pieces if isinstance(p, str)]
        encoded = iter(self.tokenizer.encode_batch(texts, add_special_tokens=False))
        ids_list: list[int] = []
        for piece in pieces:
            ids_list += (
                next(encoded).ids if isinstance(piece, str) else [self.byte_ids[b] for b in piece]
            )
        if self.decode(ids_list) != data:
            raise ConfigError(
                f"{self.origin} does not reproduce the text byte for byte (an added prefix "
                "space, or special tokens?); posx needs a lossless byte-level BPE"
            )
        ids = torch.tensor(ids_list, dtype=torch.int32)
        if path is not None:
            atomic_write(path, save({"ids": ids}))
        return ids

    def decode(self, ids: list[int]) -> bytes:
        """The bytes the tokens stand for, concatenated."""
        return b"".join(map(self.table.__getitem__, ids))

    def describe(self, bytes_per_token: float) -> dict[str, object]:
        """What to record with a run; ``bytes_per_token`` as measured on the training split."""
        return {
            "tokenizer": "bpe",
            "vocab_size": self.vocab_size,
            "tokenizer_sha256": self.sha256,
            "bytes_per_token": round(bytes_per_token, 4),
            "length_mapping": f"length = BPE tokens of context ({bytes_per_token:.2f} bytes per "
            "token on the training split)",
        }
