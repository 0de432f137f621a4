"""Language modelling on real text, by bytes or by BPE tokens.

The corpus (:mod:`posx.tasks.corpora`) is any local file, directory or glob, ``stdlib`` (the
default: the running Python's standard-library sources, so no download is ever needed),
``shakespeare`` or ``hf:NAME[:CONFIG][:SPLIT]``. The split is made on bytes, before any
tokenization, so it is the same for every tokenizer: the last ``val_fraction`` of the bytes is
held out (or the whole of ``val_corpus``), and validation text is never trained on, nor used to
train a tokenizer. ``length`` counts tokens (bytes for ``tokenizer=byte``).

The held-out split is the same bytes for every tokenizer, and an eval set is sized in tokens of
the run's tokenizer: ``eval_set(L, n)`` is ``n`` consecutive full windows of ``L`` tokens over
the split from its start (the first input being the single-byte token of byte 0, so the first
target is byte 1 for every tokenizer), as many bytes as those tokens take; fewer windows when
the split is shorter, and :class:`UnsupportedLength` when it cannot fill one. So a row labelled
``L`` always reads ``L`` tokens at once (a byte is a token at byte level, where this is the bytes
``[1, 1 + n·L)``). :meth:`TextTask.text_bytes` counts the bytes the scored tokens stand for, so
bits per byte are exact and comparable across tokenizers.
"""

from __future__ import annotations

import math
import zlib
from functools import cached_property
from pathlib import Path

import torch
from torch import Tensor

from posx.errors import ConfigError
from posx.tasks.base import Batch, Task
from posx.tasks.corpora import load_corpus, shakespeare_corpus
from posx.tasks.tokenize import ByteBPE, ByteTokenizer

TOKENIZERS = ("byte", "bpe")
DEFAULT_BPE_VOCAB = 4096


class UnsupportedLength(ConfigError):
    """The held-out text cannot fill one eval sequence of the length asked for. The length sweep
    records such a length as ``unsupported`` with this message, as it does a length an encoding
    cannot take; other callers see a config error."""


def make_tokenizer(
    tokenizer: str,
    vocab_size: int | None,
    tokenizer_file: str | None,
    train: bytes,
    cache: Path | None,
) -> ByteTokenizer | ByteBPE:
    """The tokenizer the task's settings name (a BPE is trained on ``train``, the training
    split's bytes, unless ``tokenizer_file`` is given)."""
    if tokenizer not in TOKENIZERS:
        raise ConfigError(
            f"unknown task.tokenizer {tokenizer!r}; choose from {', '.join(TOKENIZERS)}"
        )
    if tokenizer == "byte":
        if vocab_size is not None or tokenizer_file is not None:
            raise ConfigError(
                "task.vocab_size and task.tokenizer_file apply to task.tokenizer=bpe only"
            )
        return ByteTokenizer()
    if tokenizer_file is not None:
        if vocab_size is not None:
            raise ConfigError(
                "task.vocab_size cannot be set with task.tokenizer_file (the file fixes it)"
            )
        return ByteBPE.from_file(tokenizer_file)
    return ByteBPE.train(train, vocab_size or DEFAULT_BPE_VOCAB, cache)


class TextTask(Task):
    """Next-token prediction on text; every target is scored.

    Args:
        corpus: Path, directory, glob, ``"shakespeare"``, ``"hf:NAME[:CONFIG][:SPLIT]"``, or
            ``"stdlib"`` (default) for the running Python's standard-library sources.
        val_fraction: Fraction of bytes (at the end) held out for evaluation; unused when
            ``val_corpus`` is given.
        max_bytes: Read at most this many bytes of the corpus (and of ``val_corpus``).
        tokenizer: ``byte`` (one token per byte, vocab 256) or ``bpe`` (byte-level BPE).
        vocab_size: BPE vocabulary, 256 bytes included (default 4096); BPE only.
        tokenizer_file: A saved byte-level ``tokenizer.json`` to use instead of training one.
        val_corpus: A separate held-out corpus (e.g. a dataset's validation split).
        cache_dir: Where trained tokenizers and tokenized training text are cached (``build_task``
            passes ``<results root>/.tokenizer_cache``); ``None``: no cache.
    """

    def __init__(
        self,
        corpus: str = "stdlib",
        val_fraction: float = 0.05,
        max_bytes: int = 8_000_000,
        tokenizer: str = "byte",
        vocab_size: int | None = None,
        tokenizer_file: str | None = None,
        val_corpus: str | None = None,
        cache_dir: str | None = None,
    ) -> None:
        if not 0.0 < val_fraction < 1.0:
            raise ConfigError(f"val_fraction must be in (0, 1), got {val_fraction}")
        if max_bytes <= 0:
            raise ConfigError(f"max_bytes must be positive, got {max_bytes}")
        resolve = lambda c: shakespeare_corpus() if c == "shakespeare" else c  # noqa: E731
        self.corpus = resolve(corpus)
        self.val_corpus = resolve(val_corpus) if val_corpus else None
        data = load_corpus(self.corpus, max_bytes)
        if self.val_corpus:
            self.train_data, self.val_data = data, load_corpus(self.val_corpus, max_bytes)
        else:
            split = int(len(data) * (1.0 - val_fraction))
            self.train_data, self.val_data = data[:split], data[split:]
        train, self._val = self.train_data.numpy().tobytes(), self.val_data.numpy().tobytes()
        self.checksum = zlib.crc32(self._val, zlib.crc32(train))
        self._cache = Path(cache_dir) if cache_dir else None
        self.tokenizer = make_tokenizer(tokenizer, vocab_size, tokenizer_file, train, self._cache)
        self.vocab_size = self.tokenizer.vocab_size
        # A byte-level run's L=128 is 128 bytes, a BPE run's 128 tokens: reports keep the two
        # apart (one unit per column) by what the rows record here.
        self.length_unit = self.tokenizer.unit
        self.train_ids = self.tokenizer.encode(train, self._cache)

    def _too_short(self, n: int, length: int, split: str, size: str = "") -> str | None:
        """Why ``n`` tokens of ``split`` cannot hold one sequence of ``length`` (+1 target), or
        ``None`` when they can; ``size`` adds the split's bytes where tokens are not bytes."""
        if n >= length + 1:
            return None
        return (
            f"the corpus {split} split has {n} {self.tokenizer.unit}{size}, fewer than one "
            f"sequence of {length} tokens (+1 target); use a larger corpus or a shorter length"
        )

    @cached_property
    def val_ids(self) -> Tensor:
        """``[1 + t]`` (the tokenizer's compact dtype): the single-byte token of held-out byte 0
        (context only, never a target), then the ``t`` tokens of bytes ``1..``, encoded once as
        one running text (cached like the training ids), so where a window ends never changes
        how the text is tokenized."""
        rest = self.tokenizer.encode(self._val[1:], self._cache)
        first = [self.tokenizer.byte_ids[b] for b in self._val[:1]]
        return torch.cat([torch.tensor(first, dtype=rest.dtype), rest])

    def train_batch(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        reason = self._too_short(len(self.train_ids), length, "train")
        if reason:
            raise ConfigError(reason)
        starts = torch.randint(len(self.train_ids) - length, (batch_size, 1), generator=generator)
        window = self.train_ids[starts + torch.arange(length + 1)].long()
        return Batch(
            window[:, :-1], window[:, 1:], torch.ones(batch_size, length, dtype=torch.bool)
        )

    def eval_set(self, length: int, num_sequences: int, seed: int) -> Batch:
        """Consecutive full windows of ``length`` tokens over the held-out split from its start
        (see the module docstring): ``num_sequences`` of them, or as many as the split fills.

        ``seed`` is unused: the text held out is the same for every seed.

        Returns:
            ``[n, length]`` inputs, targets (inputs shifted by one) and an all-True mask.

        Raises:
            UnsupportedLength: The split has fewer than ``length + 1`` tokens.
        """
        ids = self.val_ids
        bytes_ = "" if self.tokenizer.unit == "bytes" else f" ({len(self._val)} bytes)"
        reason = self._too_short(len(ids), length, "validation", bytes_)
        if reason:
            raise UnsupportedLength(reason)
        n = min(num_sequences, (len(ids) - 1) // length)
        window = ids[torch.arange(n).unsqueeze(1) * length + torch.arange(length + 1)].long()
        return Batch(window[:, :-1], window[:, 1:], torch.ones(n, length, dtype=torch.bool))

    def text_bytes(self, data: Batch) -> int:
        """Bytes of text the scored targets of ``data`` stand for."""
        return int(self.tokenizer.lengths[data.targets[data.mask]].sum())

    def describe(self) -> dict[str, object]:
        info: dict[str, object] = {
            "corpus": self.corpus,
            "corpus_bytes": len(self.train_data) + len(self.val_data),
            "corpus_crc32": self.checksum,
            "val_bytes": len(self.val_data),
        }
        if self.val_corpus:
            info["val_corpus"] = self.val_corpus
        per_token = len(self.train_data) / max(len(self.train_ids), 1)
        return {**info, **self.tokenizer.describe(per_token)}


def sequences_for(tokens: int, length: int) -> int:
    """Number of sequences that hold at least ``tokens`` tokens at ``length`` (``eval.tokens``
    counts tokens of the run's tokenizer: bytes at byte level, BPE tokens for a BPE)."""
    return max(1, math.ceil(tokens / length))
