"""The held-out text of ``task.corpus``, in a pretrained model's tokens, with the bytes each
token stands for.

The split is posx's (:class:`posx.tasks.text.TextTask`): the last ``val_fraction`` of the
corpus's bytes, or the whole of ``val_corpus``. It is decoded as UTF-8 (a character cut by the
split boundary is dropped) and tokenized once as one running text with the tokenizer's defaults
(its BOS token, if it adds one, first), so where a window ends never changes the tokenization.
Windows of ``L`` tokens follow each other from the start, as for posx's own runs: the first
token is context only, so the scored targets are tokens ``1 .. n·L``.

Bytes per token come from the tokenizer's character offsets, turned into UTF-8 byte offsets:
token ``i`` stands for the bytes from the end of everything before it to its own end. Special
tokens stand for none, byte-level pieces of one character give that character to the first,
and a sentencepiece ``▁`` gives its space to the word it starts, so every byte of the text is
counted once whichever style the tokenizer has.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posx.errors import ConfigError
from posx.tasks.base import Batch
from posx.tasks.corpora import load_corpus, shakespeare_corpus
from posx.tasks.text import UnsupportedLength


@dataclass
class HeldOut:
    """A held-out text in a model's tokens.

    Attributes:
        ids: ``[t]`` int64 token ids of the whole text.
        nbytes: ``[t]`` int64 UTF-8 bytes each token stands for.
        text: The decoded held-out text.
        describe: Corpus identity for ``run.json`` (name, sizes, checksum).
    """

    ids: Tensor
    nbytes: Tensor
    text: str
    describe: dict[str, Any]

    def windows(self, length: int, sequences: int) -> tuple[Batch, int]:
        """``sequences`` consecutive windows of ``length`` tokens from the start (fewer when the
        text is shorter), and the bytes their targets stand for.

        Raises:
            UnsupportedLength: The text has fewer than ``length + 1`` tokens.
        """
        if len(self.ids) < length + 1:
            raise UnsupportedLength(
                f"the corpus validation split has {len(self.ids)} tokens of this model "
                f"({len(self.text.encode())} bytes), fewer than one sequence of {length} tokens "
                "(+1 target); use a larger corpus or a shorter length"
            )
        n = min(sequences, (len(self.ids) - 1) // length)
        index = torch.arange(n).unsqueeze(1) * length + torch.arange(length + 1)
        window = self.ids[index]
        batch = Batch(window[:, :-1], window[:, 1:], torch.ones(n, length, dtype=torch.bool))
        return batch, int(self.nbytes[1 : 1 + n * length].sum())


def token_bytes(text: str, offsets: list[tuple[int, int]]) -> list[int]:
    """UTF-8 bytes each token stands for, from its ``(start, end)`` character offsets.

    Args:
        text: The text that was tokenized.
        offsets: Character offsets per token (``(0, 0)`` for special tokens).

    Returns:
        Per token, the bytes from the furthest end reached before it up to its own end (so
        the counts sum to the bytes of ``text`` the tokens cover, each counted once).
    """
    # byte offset of each character boundary: starts[c] = len(text[:c].encode())
    starts = [0]
    for ch in text:
        starts.append(starts[-1] + len(ch.encode("utf-8", "surrogatepass")))
    out, reached = [], 0
    for start, end in offsets:
        end_byte = starts[end] if end > start else reached
        out.append(max(0, end_byte - reached))
        reached = max(reached, end_byte)
    return out


def held_out_bytes(corpus: str, val_fraction: float, max_bytes: int, val_corpus: str | None):
    """The held-out bytes of a corpus, split as posx's text task splits it, and the corpus name.

    Raises:
        ConfigError: A bad fraction or size (the corpus's own errors come from its loader).
    """
    if not 0.0 < val_fraction < 1.0:
        raise ConfigError(f"task.val_fraction must be in (0, 1), got {val_fraction}")
    if max_bytes <= 0:
        raise ConfigError(f"task.max_bytes must be positive, got {max_bytes}")
    name = shakespeare_corpus() if corpus == "shakespeare" else corpus
    if val_corpus:
        return load_corpus(val_corpus, max_bytes).numpy().tobytes(), name
    data = load_corpus(name, max_bytes)
    return data[int(len(data) * (1.0 - val_fraction)) :].numpy().tobytes(), name


def tokenize_held_out(tokenizer: Any, raw: bytes, corpus: str) -> HeldOut:
    """The held-out bytes ``raw`` in ``tokenizer``'s tokens, with bytes per token.

    Args:
        tokenizer: A fast ``transformers`` tokenizer.
        raw: The held-out bytes.
        corpus: The corpus's name, for the record.

    Returns:
        The token ids, bytes per token and the decoded text.
    """
    # The split may cut a character: drop continuation bytes at the start, and let the decoder
    # drop a cut character at the end.
    start = 0
    while start < min(len(raw), 4) and raw[start] & 0xC0 == 0x80:
        start += 1
    text = raw[start:].decode("utf-8", errors="ignore")
    enc = tokenizer(text, return_offsets_mapping=True, verbose=False)
    ids = torch.tensor(enc["input_ids"], dtype=torch.int64)
    nbytes = torch.tensor(token_bytes(text, enc["offset_mapping"]), dtype=torch.int64)
    return HeldOut(ids, nbytes, text, describe_text(corpus, "val", text, len(ids)))


def describe_text(corpus: str, split: str, text: str, tokens: int) -> dict[str, Any]:
    """What ``run.json`` records of a split's text: its corpus, bytes, SHA-256 (16 hex), tokens
    and bytes per token, keys prefixed by ``split`` (``val_bytes``, ``train_bytes``)."""
    encoded = text.encode()
    return {
        "corpus": corpus,
        f"{split}_bytes": len(encoded),
        f"{split}_sha256": hashlib.sha256(encoded).hexdigest()[:16],
        f"{split}_tokens": tokens,
        "bytes_per_token": round(len(encoded) / max(tokens, 1), 4),
    }
