"""The text a pretrained model is fine-tuned on: the held-in part of ``task.corpus``, in the
model's own tokens, packed into windows.

The split is the one ``posx eval hf:`` holds out (:func:`posx.pretrained.text.held_out_bytes`):
the last ``val_fraction`` of the corpus's bytes are never trained on (or, with
``task.val_corpus``, the whole of ``task.corpus`` is held in). The held-in text is tokenized
once as one running text and cut into consecutive windows of the training length. The windows
a step reads are a function of ``(seed, step)`` only (an epoch is a seeded permutation of all
windows), so every process of a ``torchrun`` job draws the same global batch and keeps its own
rows, and a resumed run reads what an uninterrupted one would have.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from posx.errors import ConfigError
from posx.positions.pose import pose_positions
from posx.pretrained.text import describe_text
from posx.tasks.corpora import load_corpus, shakespeare_corpus


def held_in_bytes(corpus: str, val_fraction: float, max_bytes: int, val_corpus: str | None):
    """The held-in bytes of ``corpus`` (all of it when ``val_corpus`` is given) and its name."""
    name = shakespeare_corpus() if corpus == "shakespeare" else corpus
    data = load_corpus(name, max_bytes)
    if not val_corpus:
        data = data[: int(len(data) * (1.0 - val_fraction))]
    return data.numpy().tobytes(), name


@dataclass
class TrainingText:
    """The held-in text in a model's tokens, and how it is read.

    Attributes:
        ids: ``[t]`` int64 token ids of the held-in text.
        describe: Its identity for ``run.json`` (corpus, bytes, SHA-256, tokens, bytes/token).
    """

    ids: Tensor
    describe: dict[str, Any]
    _orders: dict[tuple[int, int, int], Tensor] = field(default_factory=dict, repr=False)

    def window_count(self, length: int) -> int:
        """Windows of ``length`` tokens the text holds.

        Raises:
            ConfigError: Not one.
        """
        n = len(self.ids) // length
        if n < 1:
            raise ConfigError(
                f"the held-in text of {self.describe['corpus']} has {len(self.ids)} tokens of "
                f"this model, fewer than one window of {length}; use a larger task.corpus (or "
                "task.max_bytes)"
            )
        return n

    def batch(self, step: int, size: int, length: int, seed: int) -> Tensor:
        """The global batch of step ``step`` (0-based): ``[size, length]`` token ids."""
        n = self.window_count(length)
        index = [self._window(step * size + i, n, seed) for i in range(size)]
        start = torch.tensor(index).unsqueeze(1) * length
        return self.ids[start + torch.arange(length)]

    def _window(self, i: int, n: int, seed: int) -> int:
        epoch, k = divmod(i, n)
        key = (n, seed, epoch)
        if key not in self._orders:
            generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
            self._orders = {key: torch.randperm(n, generator=generator)}  # one epoch kept
        return int(self._orders[key][k])


def positions(step: int, size: int, length: int, target: int, chunks: int, seed: int) -> Tensor:
    """PoSE's ``position_ids`` ``[size, length]`` for step ``step``, a function of
    ``(seed, step)`` as the windows are; ``chunks`` 0: ``0..length-1`` for every row."""
    if not chunks:
        return torch.arange(length).expand(size, length)
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step + 7)
    return pose_positions(size, length, target, chunks, generator)


def tokenize_held_in(tokenizer: Any, raw: bytes, corpus: str) -> TrainingText:
    """The held-in bytes in ``tokenizer``'s tokens (its defaults: a BOS first if it adds one)."""
    text = raw.decode("utf-8", errors="ignore")  # a character cut at the split is dropped
    ids = torch.tensor(tokenizer(text, verbose=False)["input_ids"], dtype=torch.int64)
    return TrainingText(ids, describe_text(corpus, "train", text, len(ids)))
