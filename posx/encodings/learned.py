"""Learned absolute position embeddings (GPT-2, BERT): one trained vector per position."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posx.encodings.base import PositionalEncoding, table_init_std


class Learned(PositionalEncoding):
    """A table of ``max_len`` trained vectors added to token embeddings.

    Positions past ``max_len`` have no vector: the evaluator reports them as unsupported.

    Args:
        d_model: Model width.
        max_len: Number of positions in the table; ``None``: ``train_positions``.
        train_positions: How many positions training reaches (posx passes it: the training
            sequence's tokens, which a task counting digits makes more than ``train.length``,
            or more when the position strategy's IDs go past them).
        init_std: Standard deviation of the table's normal initialisation; ``None``: 0.02
            (GPT-2's, what every run saved before the setting existed used). 1.0 is PyTorch's
            ``nn.Embedding`` default (docs/reproductions.md, arithmetic, measures both).

    Raises:
        ValueError: Neither is given, the table would be empty, or ``init_std`` is not > 0.
    """

    def __init__(
        self,
        d_model: int,
        max_len: int | None = None,
        train_positions: int | None = None,
        init_std: float | None = None,
    ) -> None:
        super().__init__()
        max_len = train_positions if max_len is None else max_len
        if max_len is None:
            raise ValueError("learned encoding needs max_len (or train_positions)")
        if max_len <= 0:
            raise ValueError(f"learned encoding needs max_len > 0, got {max_len}")
        self.max_len = max_len
        self.table = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.table.weight, std=table_init_std(init_std, "learned encoding"))

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        if pos.is_floating_point():
            raise ValueError("learned positions must be integers, got float positions")
        top = int(pos.max())
        if top >= self.max_len:
            raise ValueError(f"position {top} is past the learned table's {self.max_len} rows")
        return x + self.table(pos)

    def resize_parameter(self, name: str, old: Tensor, how: str) -> Tensor:
        """The table of another length, made from a trained one (``posx extend`` with
        ``extend.resize``, when ``train.length`` and so ``max_len`` change).

        Args:
            name: The parameter's name in this module (only ``table.weight`` has a length).
            old: The trained table ``[L_old, d_model]``.
            how: ``interpolate``: rows resampled linearly to ``max_len`` (end rows kept, as
                position interpolation maps ``0..L_new-1`` onto ``0..L_old-1``); ``copy``: the
                trained rows repeated (row ``i`` = trained row ``i mod L_old``, Longformer's
                copy initialisation), or the first ``max_len`` of them when shrinking.

        Returns:
            The new table ``[max_len, d_model]``.

        Raises:
            ValueError: Another parameter, or another ``how``.
        """
        if name != "table.weight":
            raise ValueError(f"learned encoding cannot resize {name}")
        if how == "interpolate":
            rows = old.t().unsqueeze(0)  # [1, d_model, L_old]: interpolate over positions
            size = self.max_len
            new = nn.functional.interpolate(rows, size=size, mode="linear", align_corners=True)
            return new.squeeze(0).t().contiguous()
        if how == "copy":
            index = torch.arange(self.max_len) % old.shape[0]
            return old[index].clone()
        raise ValueError(f"extend.resize must be interpolate or copy, got {how!r}")
