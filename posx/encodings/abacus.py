"""Abacus embeddings (McLeish et al. 2024, "Transformers Can Do Arithmetic with the Right
Embeddings"): a learned vector per *index within a number*, added to the token embedding.

The encoding is a learned table indexed by whatever ``pos`` holds; the ``abacus`` position
strategy (:class:`posx.positions.AbacusPositions`) makes ``pos`` the paper's index: 1 for a
number's least-significant digit, 2 for the next, ... (0 for non-digits), shifted by a random
offset during training. Attention itself gets no positional signal (as NoPE), as in the paper's
main Abacus models. With ``positions=default`` it is a learned absolute table of ``max_index``
rows.
"""

from __future__ import annotations

from torch import Tensor, nn

from posx.encodings.base import PositionalEncoding, table_init_std
from posx.errors import ConfigError


class Abacus(PositionalEncoding):
    """A table of ``max_index`` learned vectors, row ``p`` added where ``pos == p``.

    The table bounds the *index* (digits per number plus the training offset), not the sequence
    length, so ``max_len`` stays ``None``; :meth:`unsupported_reason` is asked for the indices
    the position strategy gives (an eval row then says ``unsupported``), and an index past the
    table still raises :class:`~posx.errors.ConfigError`.

    Args:
        d_model: Model width.
        max_index: Rows of the table (the paper: 100 + the training offset range).
        init_std: Standard deviation of the table's normal initialisation; ``None``: 0.02
            (what every run saved before the setting existed used); 1.0 is PyTorch's
            ``nn.Embedding`` default.
    """

    needs_structure = True  # its rows are digit places: positions=abacus makes them

    def __init__(self, d_model: int, max_index: int = 512, init_std: float | None = None) -> None:
        super().__init__()
        if max_index <= 0:
            raise ConfigError(f"abacus encoding needs max_index > 0, got {max_index}")
        self.max_index = max_index
        self.table = nn.Embedding(max_index, d_model)
        nn.init.normal_(self.table.weight, std=table_init_std(init_std, "abacus encoding"))

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        """``x [b, s, d]`` plus row ``pos`` (``[s]`` or ``[b, s]``, integer) of the table."""
        if pos.is_floating_point():
            # ValueError, as learned's: positions an embedding table cannot take
            raise ValueError("abacus indices must be integers, got float positions")
        top = int(pos.max())
        if top >= self.max_index:
            raise ConfigError(
                f"abacus index {top} is past the table's {self.max_index} rows"
                f" (set encoding.max_index > {top})"
            )
        return x + self.table(pos)

    def unsupported_reason(self, length: int) -> str | None:
        """Indices ``0 .. length - 1`` past the table's rows cannot be evaluated."""
        if length > self.max_index:
            return f"Abacus has {self.max_index} rows; asked for {length}"
        return None

    def extra_repr(self) -> str:
        return f"max_index={self.max_index}"
