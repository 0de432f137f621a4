"""Training-time position strategies: they change only the ``pos`` tensor the model receives.

- ``default``: ``pos = arange(length)`` in training and evaluation.
- ``randomized`` (Ruoss et al. 2023, "Randomized Positional Encodings Boost Length
  Generalization of Transformers"): each training sequence gets ``length`` positions sampled
  without replacement from ``[0, max_pos)`` and sorted, so the model sees positions up to
  ``max_pos`` while training on short sequences; optionally the same at evaluation.
- ``pose`` (Zhu et al. 2023, "PoSE: Efficient Context Window Extension of LLMs via Positional
  Skip-wise Training"): the training window is cut into ``chunks`` contiguous pieces at random
  points; chunk ``c > 0`` is shifted by an offset ``u_c`` drawn from ``[u_{c-1}, target_length -
  length]`` (non-decreasing, as in the paper), so positions stay increasing and cover
  ``[0, target_length)``. Evaluation uses ``arange``.

- ``coupling`` (Cho et al. 2024, "Position Coupling: Improving Length Generalization of
  Arithmetic Transformers Using Task Structure"): digits of the same significance in every
  operand share one position ID, and so does the token that predicts the answer's digit of that
  significance; a random start offset in training. Works with every encoding that reads ``pos``.
- ``abacus`` (McLeish et al. 2024): a digit's position is its index within its number (1 for
  the units digit, 0 for non-digits), plus a random offset in training; meant for
  ``encoding=abacus`` (the learned table the paper adds to token embeddings).

The last two read the task's per-token structure (:meth:`posx.tasks.base.Task.structure`):
they declare ``needs_structure`` and implement :meth:`PositionStrategy.structured`, and the
trainer and evaluator hand them the structure; they never ask which task it is.

Every strategy samples per sequence (``[b, s]`` positions) from the generator it is given, so a
run is reproducible from its seed.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from posx.encodings.base import PositionalEncoding
from posx.encodings.structure import TokenStructure
from posx.errors import ConfigError, PosxError


class PositionStrategy:
    """``default``: positions ``0..length-1`` everywhere."""

    name = "default"
    #: Positions come from the task's token structure (:meth:`structured`), not the length.
    needs_structure = False

    def structured(
        self, structure: TokenStructure, generator: torch.Generator, training: bool
    ) -> Tensor:
        """Positions ``[b, s]`` from a task's per-token structure (strategies that declare
        ``needs_structure``); ``training`` draws the random training offsets from
        ``generator``, evaluation uses none.

        Raises:
            PosxError: The strategy does not use structure.
        """
        raise PosxError(f"positions={self.name} does not read the task's structure")

    def train_positions(self, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
        """Positions for one training batch: ``[length]`` or ``[batch_size, length]`` (CPU)."""
        return torch.arange(length)

    def eval_positions(self, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
        """Positions for one evaluation batch: ``[length]`` or ``[batch_size, length]`` (CPU)."""
        return torch.arange(length)

    @property
    def max_position(self) -> int | None:
        """Largest position + 1 that training can produce beyond ``train.length`` (or None)."""
        return None

    def unsupported_reason(self, width: int) -> str | None:
        """Why evaluation cannot give positions to ``width`` tokens at once, or ``None``."""
        return None

    def evaluator(self, seed: int) -> Callable[[int, int], Tensor] | None:
        """``(rows, width) -> positions`` for one eval length's forward passes, drawn from a
        generator seeded by ``seed`` (the same for every run); ``None`` means ``arange``."""
        if type(self).eval_positions is PositionStrategy.eval_positions:
            return None
        generator = torch.Generator().manual_seed(seed)
        return lambda rows, width: self.eval_positions(rows, width, generator)

    def check(self, encoding: PositionalEncoding, train_length: int) -> None:
        """Raises :class:`ConfigError` when the strategy cannot train with ``encoding``."""
        top = self.max_position
        if top is None:
            return
        if top < train_length:
            raise ConfigError(
                f"positions={self.name} needs its largest position ({top}) >= train.length "
                f"({train_length})"
            )
        self.check_table(encoding, top)

    def positions_needed(self, train_length: int, tokens: int) -> int:
        """Positions a training sequence of ``tokens`` tokens (``train.length`` in the task's
        unit) reaches: the size a learned table gets by default."""
        return tokens

    def check_table(self, encoding: PositionalEncoding, top: int) -> None:
        """Raises :class:`ConfigError` when training positions reach ``top - 1`` but
        ``encoding`` has fewer positions (its ``max_len``)."""
        limit = encoding.max_len
        if limit is not None and limit < top:
            raise ConfigError(
                f"positions={self.name} trains positions up to {top - 1} but "
                f"{type(encoding).__name__} has only {limit} (set encoding.max_len={top})"
            )

    def describe(self) -> dict[str, object]:
        return {"name": self.name}


DefaultPositions = PositionStrategy


def randomized_positions(
    batch_size: int, length: int, max_pos: int, generator: torch.Generator
) -> Tensor:
    """``length`` sorted distinct positions from ``[0, max_pos)`` per row: ``[b, length]``."""
    if length > max_pos:
        raise PosxError(f"cannot draw {length} distinct positions from [0, {max_pos})")
    keys = torch.rand(batch_size, max_pos, generator=generator)
    return keys.argsort(dim=-1)[:, :length].sort(dim=-1).values


class RandomizedPositions(PositionStrategy):
    """Ruoss et al.'s randomized positions.

    Args:
        max_pos: Positions are drawn from ``[0, max_pos)``; should exceed every eval length.
        at_eval: Also sample positions at evaluation (seeded by ``eval.seed``); else ``arange``.
    """

    name = "randomized"

    def __init__(self, max_pos: int = 1024, at_eval: bool = False) -> None:
        if max_pos <= 0:
            raise ConfigError(f"positions.max_pos must be positive, got {max_pos}")
        self.max_pos, self.at_eval = max_pos, at_eval

    @property
    def max_position(self) -> int | None:
        return self.max_pos

    def train_positions(self, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
        return randomized_positions(batch_size, length, self.max_pos, generator)

    def evaluator(self, seed: int) -> Callable[[int, int], Tensor] | None:
        return super().evaluator(seed) if self.at_eval else None

    def unsupported_reason(self, width: int) -> str | None:
        if self.at_eval and width > self.max_pos:
            return f"randomized positions at eval draw from [0, {self.max_pos}); asked for {width}"
        return None

    def eval_positions(self, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
        if not self.at_eval:
            return torch.arange(length)
        return randomized_positions(batch_size, length, self.max_pos, generator)

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "max_pos": self.max_pos, "at_eval": self.at_eval}


def pose_positions(
    batch_size: int, length: int, target_length: int, chunks: int, generator: torch.Generator
) -> Tensor:
    """PoSE positions ``[b, length]``: ``chunks`` pieces, later ones skipped forward.

    Chunk boundaries are ``chunks - 1`` distinct cut points drawn from ``[1, length)``; chunk
    ``c`` keeps its indices and adds ``u_c`` (``u_0 = 0``, ``u_c`` uniform in
    ``[u_{c-1}, target_length - length]``), so the last position is ``< target_length``.
    """
    chunks = min(chunks, length)
    skip = target_length - length
    cuts = torch.rand(batch_size, length - 1, generator=generator).argsort(-1)[:, : chunks - 1]
    cuts = cuts.sort(-1).values + 1  # [b, chunks - 1] in [1, length)
    chunk_of = torch.zeros(batch_size, length, dtype=torch.long)
    chunk_of.scatter_add_(1, cuts, torch.ones_like(cuts))
    chunk_of = chunk_of.cumsum(-1)  # chunk id of each token
    offsets = torch.zeros(batch_size, chunks, dtype=torch.long)
    for c in range(1, chunks):
        lo = offsets[:, c - 1]
        span = (skip - lo + 1).float()
        offsets[:, c] = lo + (torch.rand(batch_size, generator=generator) * span).long()
    return torch.arange(length) + offsets.gather(1, chunk_of)


class PoSEPositions(PositionStrategy):
    """Zhu et al.'s positional skip-wise training.

    Args:
        target_length: The context length to emulate (positions reach ``target_length - 1``).
        chunks: Number of chunks the training window is cut into (2 in the paper).
    """

    name = "pose"

    def __init__(self, target_length: int = 512, chunks: int = 2) -> None:
        if chunks < 1:
            raise ConfigError(f"positions.chunks must be >= 1, got {chunks}")
        if target_length <= 0:
            raise ConfigError(f"positions.target_length must be positive, got {target_length}")
        self.target_length, self.chunks = target_length, chunks

    @property
    def max_position(self) -> int | None:
        return self.target_length

    def train_positions(self, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
        if length > self.target_length:
            raise PosxError(
                f"PoSE target_length {self.target_length} is below the window length {length}"
            )
        return pose_positions(batch_size, length, self.target_length, self.chunks, generator)

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "target_length": self.target_length, "chunks": self.chunks}


class StructuredPositions(PositionStrategy):
    """Base of the strategies that read the task's structure.

    Args:
        max_offset: Training offsets are uniform in ``[0, max_offset]`` per sequence, so
            positions past the training digits are trained too.
        eval_offset: The offset of every evaluation sequence (the papers: 0). Offset 0 puts a
            number's first digits at the IDs only the smallest training offsets reach; a
            small model may leave them undertrained (docs/reproductions.md, arithmetic).
    """

    needs_structure = True

    def __init__(self, max_offset: int = 32, eval_offset: int = 0) -> None:
        if max_offset < 0:
            raise ConfigError(f"positions.max_offset must be >= 0, got {max_offset}")
        if not 0 <= eval_offset <= max_offset:
            raise ConfigError(
                f"positions.eval_offset must be in [0, max_offset={max_offset}], got {eval_offset}"
            )
        self.max_offset, self.eval_offset = max_offset, eval_offset

    def offsets(self, rows: int, generator: torch.Generator, training: bool) -> Tensor:
        """``[rows, 1]`` per-sequence offsets: uniform in ``[0, max_offset]`` in training,
        ``eval_offset`` otherwise."""
        if not training or self.max_offset == 0:
            return torch.full((rows, 1), self.eval_offset, dtype=torch.long)
        return torch.randint(self.max_offset + 1, (rows, 1), generator=generator)

    def train_positions(self, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
        raise PosxError(f"positions={self.name} needs the task's structure, not only a length")

    def check(self, encoding: PositionalEncoding, train_length: int) -> None:
        """Positions reach ``max_offset + train.length + 2`` (digits of the longest number, the
        answer's carry digit and the answer shift); an encoding with fewer must say so."""
        self.check_table(encoding, self.positions_needed(train_length, 0))

    def positions_needed(self, train_length: int, tokens: int) -> int:
        """IDs up to ``max_offset + train.length + 2`` (see :meth:`check`), or the tokens."""
        return max(tokens, self.max_offset + train_length + 3)

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "max_offset": self.max_offset, "eval_offset": self.eval_offset}


class CoupledPositions(StructuredPositions):
    """Cho et al.'s position coupling for tasks written least-significant digit first.

    A digit of significance ``j`` gets ID ``o + 1 + j`` in every operand; the answer is shifted
    by one so that the token *predicting* the answer digit of significance ``j`` (the answer
    start for ``j = 0``, else the answer digit ``j - 1``) has ID ``o + 1 + j``, the ID of the
    operand digits it needs. Every other token (BOS, operators, padding) gets ID 0. ``o`` is the
    random training offset.

    ``max_offset`` and ``eval_offset`` as in :class:`StructuredPositions` (the paper samples
    the start ID at random in training and starts at 0 at evaluation).
    """

    name = "coupling"

    def structured(
        self, structure: TokenStructure, generator: torch.Generator, training: bool
    ) -> Tensor:
        sig = structure.significance + structure.in_answer.long()
        shared = (structure.role != TokenStructure.ROLE_OTHER) & (
            structure.role != TokenStructure.ROLE_OPERATOR
        )
        offset = self.offsets(sig.shape[0], generator, training)
        return torch.where(shared, offset + 1 + sig, 0)


class AbacusPositions(StructuredPositions):
    """McLeish et al.'s Abacus indices: ``1 + significance + o`` for digits, 0 elsewhere.

    ``max_offset`` and ``eval_offset`` as in :class:`StructuredPositions` (the paper: training
    offsets up to ``k = 100`` for 20-digit training, none at evaluation).
    """

    name = "abacus"

    def structured(
        self, structure: TokenStructure, generator: torch.Generator, training: bool
    ) -> Tensor:
        offset = self.offsets(structure.role.shape[0], generator, training)
        return torch.where(structure.is_digit, offset + 1 + structure.significance, 0)

    def check(self, encoding: PositionalEncoding, train_length: int) -> None:
        """As :meth:`StructuredPositions.check`, and the Abacus table's rows when it has one."""
        super().check(encoding, train_length)
        rows = getattr(encoding, "max_index", None)  # the Abacus table bounds indices, not length
        top = self.max_offset + train_length + 2
        if rows is not None and rows < top:
            raise ConfigError(
                f"positions=abacus trains indices up to {top - 1} but the table has {rows}"
                f" rows (set encoding.max_index={top} or lower positions.max_offset)"
            )


def step_positions(
    strategy: PositionStrategy,
    seed: int,
    step: int,
    batch_size: int,
    length: int,
    world: object | None = None,
) -> Tensor:
    """Training positions of step ``step`` for this process's rows of the global batch.

    The generator is seeded from ``(seed, step)`` alone, so positions do not disturb the data
    order (``rope`` and ``rope+randomized`` see the same batches) and a resumed run draws the
    same positions without saving any generator state.

    Args:
        strategy: The run's position strategy.
        seed: The run's seed.
        step: Zero-based optimizer step.
        batch_size: Global batch size (all processes).
        length: Training length.
        world: ``posx.runtime.distributed.World`` (``rank``, ``size``) or ``None`` for one process.

    Returns:
        ``[length]`` or ``[rows, length]`` positions on the CPU.
    """
    generator = torch.Generator().manual_seed((seed * 1_000_003 + step) % 2**62)
    pos = strategy.train_positions(batch_size, length, generator)
    size = getattr(world, "size", 1)
    if pos.dim() == 2 and size > 1:
        per = batch_size // size
        rank = getattr(world, "rank", 0)
        pos = pos[rank * per : (rank + 1) * per]
    return pos


def structured_step_positions(
    strategy: PositionStrategy,
    structure: TokenStructure,
    seed: int,
    step: int,
    world: object | None = None,
) -> Tensor:
    """Training positions ``[rows, s]`` of step ``step`` from this process's rows' structure.

    Seeded from ``(seed, step)`` like :func:`step_positions`; offsets are drawn for the global
    batch (every process's rows) and this process keeps its own, so a run's positions do not
    depend on how many processes train it.
    """
    generator = torch.Generator().manual_seed((seed * 1_000_003 + step) % 2**62)
    size, rank = getattr(world, "size", 1), getattr(world, "rank", 0)
    rows = structure.role.shape[0]
    whole = TokenStructure(
        *(t.repeat(size, 1) for t in (structure.number, structure.significance, structure.role))
    )
    pos = strategy.structured(whole, generator, training=True)
    return pos[rank * rows : (rank + 1) * rows]
