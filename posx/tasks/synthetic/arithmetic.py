"""Arithmetic in the formats of the length-generalization papers, measured in digits.

Addition of two numbers of mixed lengths, every number written least-significant digit first
(McLeish et al. 2024, Abacus; Cho et al. 2024, position coupling; Zhou et al. 2024, index
hints)::

    BOS a_0 a_1 .. a_{la-1} + b_0 .. b_{lb-1} SEP c_0 c_1 .. c_m        m = max(la, lb)

The sum keeps ``max(la, lb) + 1`` digits (its top digit may be 0), so the answer's length is
known from the question and teacher-forced exact match equals greedy exact match. With
``index_hints`` (Zhou et al.) every digit of significance ``j`` is preceded by hint token
``h_{o+j}``, the same hint in both operands and the answer; the hints of an instance start at a
random ``o`` (so every hint is trained, also those past the training digits) and the answer's
hints are scored like its digits::

    BOS h_o a_0 h_{o+1} a_1 .. + h_o b_0 .. SEP h_o c_0 h_{o+1} c_1 ..

``op: multiply`` multiplies by a number of ``multiplier_digits`` (at most) instead: ``a * b`` with
``lb <= multiplier_digits``, product of ``la + multiplier_digits`` digits.

Length mapping: ``length`` is the number of digits ``D`` of the longer operand (this task's
``length_unit`` is ``digits``). Training draws both operand lengths uniformly from
``[min_size, D]``, independently per instance; evaluation at ``D`` gives one operand exactly
``D`` digits and the other a length uniform in ``[min_size, D]`` (which one is random), so the
eval lengths ``1 .. 3N`` together cover the whole operand-length grid. An operand of ``n >= 2``
digits has a non-zero leading digit, so its length is its number of significant digits.
Sequences are ``tokens_for(D)`` tokens (padded). Exact match is scored on the answer; the eval
row also records it per operand-length pair (``operand_grid``), the grid the papers plot.
"""

from __future__ import annotations

import json

import torch
from torch import Tensor

from posx.errors import ConfigError
from posx.tasks.base import Batch, TokenStructure
from posx.tasks.synthetic.addition import add_digits
from posx.tasks.synthetic.common import Instances, SyntheticTask, assemble, eval_generator
from posx.tasks.synthetic.multiplication import multiply_digits

BASE = 10
OPS = ("add", "multiply")


def concat_rows(parts: list[tuple[Tensor, Tensor]], fill: int) -> tuple[Tensor, Tensor]:
    """Concatenates variable-length row segments: ``parts`` of ``(tokens [b, w_i], len [b])``.

    Returns:
        ``(tokens [b, sum w_i], lengths [b])``; row ``i`` holds its segments back to back in its
        first ``lengths[i]`` columns, ``fill`` after them.
    """
    b = parts[0][0].shape[0]
    width = sum(t.shape[1] for t, _ in parts)
    out = torch.full((b, width + 1), fill, dtype=torch.long)  # last column: a sink for padding
    cursor = torch.zeros(b, dtype=torch.long)
    for tokens, lengths in parts:
        cols = torch.arange(tokens.shape[1])
        idx = torch.where(cols < lengths.unsqueeze(1), cursor.unsqueeze(1) + cols, width)
        out.scatter_(1, idx, tokens.long())
        cursor = cursor + lengths
    return out[:, :width], cursor


class ArithmeticTask(SyntheticTask):
    """Addition (or multiplication by a short number) with reversed digits and mixed lengths.

    Token ids: digits 0-9, the operator 10, hints ``11 .. 10 + num_hints``; PAD, BOS, SEP after.

    Args:
        op: ``add`` or ``multiply``.
        index_hints: Precede every digit by a hint token naming its significance (Zhou et al.).
        num_hints: Hint tokens available; must exceed the longest number evaluated.
        multiplier_digits: Most digits of the second operand with ``op: multiply``.
        min_size: Fewest digits of an operand.
    """

    length_unit = "digits"
    has_structure = True  # structure() reads each digit's number and place

    def __init__(
        self,
        op: str = "add",
        index_hints: bool = False,
        num_hints: int = 128,
        multiplier_digits: int = 1,
        min_size: int = 1,
    ) -> None:
        if op not in OPS:
            raise ConfigError(f"task.op must be one of {', '.join(OPS)}, got {op!r}")
        if num_hints < 2:
            raise ConfigError(f"task.num_hints must be >= 2, got {num_hints}")
        if multiplier_digits < 1:
            raise ConfigError(f"task.multiplier_digits must be >= 1, got {multiplier_digits}")
        self.op, self.index_hints, self.num_hints = op, index_hints, num_hints
        self.multiplier_digits = multiplier_digits
        self.operator, self.first_hint = BASE, BASE + 1
        self.length_mapping = "length = digits of the longer operand (length_unit: digits)"
        super().__init__(BASE + 1 + (num_hints if index_hints else 0), min_size)

    # -- lengths ---------------------------------------------------------------------------

    def answer_digits(self, size: int) -> int:
        """Digits of the answer when the longer operand has ``size`` digits."""
        return size + 1 if self.op == "add" else size + self.multiplier_digits

    def second_max(self, size: int) -> int:
        """Most digits of the second operand when the first may have ``size``."""
        return size if self.op == "add" else min(size, self.multiplier_digits)

    def footprint(self, size: int) -> int:
        per = 2 if self.index_hints else 1
        return 3 + per * (size + self.second_max(size) + self.answer_digits(size))

    def tokens_for(self, length: int) -> int:
        if length < self.min_size:
            raise ConfigError(
                f"{type(self).__name__} with min_size={self.min_size} needs at least"
                f" {self.min_size} digits, got {length}"
            )
        need = self.answer_digits(length)
        if self.index_hints and need > self.num_hints:
            raise ConfigError(
                f"{length}-digit numbers need {need} index hints; task.num_hints is"
                f" {self.num_hints} (raise it)"
            )
        return self.footprint(length) - 1

    def longest_number(self, length: int) -> int:
        """The answer's digits: no operand at ``length`` digits is longer than the answer."""
        return self.answer_digits(length)

    def size_for(self, length: int) -> int:
        self.tokens_for(length)  # the checks
        return length

    # -- instances -------------------------------------------------------------------------

    def operands(self, la: Tensor, lb: Tensor, generator: torch.Generator) -> Instances:
        """Random operands of ``la [b]`` and ``lb [b]`` digits, their answer, laid out."""
        b, w = len(la), int(torch.maximum(la, lb).max())
        x, y = self.number(la, w, generator), self.number(lb, w, generator)
        if self.op == "add":
            answer, answer_len = add_digits(x, y), torch.maximum(la, lb) + 1
        else:
            k = self.multiplier_digits
            answer, answer_len = multiply_digits(x, y[:, :k]), la + k
        parts = [(x, la), (y, lb), (answer, answer_len)]
        if self.index_hints:
            start = (torch.rand(b, generator=generator) * (self.num_hints - answer_len + 1)).long()
            parts = [self.hinted(t, n, start) for t, n in parts]
        op = (torch.full((b, 1), self.operator), torch.ones(b, dtype=torch.long))
        prompt, prompt_len = concat_rows([parts[0], op, parts[1]], self.pad)
        return Instances(prompt, prompt_len, parts[2][0], parts[2][1])

    @staticmethod
    def number(n: Tensor, width: int, generator: torch.Generator) -> Tensor:
        """Random numbers of exactly ``n [b]`` digits, least significant first: ``[b, width]``,
        zeros past each one's digits. The top digit of a number of two or more digits is never
        0, so an ``n``-digit operand has ``n`` significant digits (the papers' convention)."""
        cols = torch.arange(width)
        digits = torch.randint(BASE, (len(n), width), generator=generator)
        top = torch.randint(1, BASE, (len(n), 1), generator=generator)
        digits = torch.where((cols == n.unsqueeze(1) - 1) & (n.unsqueeze(1) > 1), top, digits)
        return digits * (cols < n.unsqueeze(1))

    def hinted(self, digits: Tensor, n: Tensor, start: Tensor) -> tuple[Tensor, Tensor]:
        """``h_{start+j} d_j`` pairs for the digits ``[b, w]`` of one number: ``[b, 2w]``."""
        hints = self.first_hint + start.unsqueeze(1) + torch.arange(digits.shape[1])
        hints = hints.clamp(max=self.first_hint + self.num_hints - 1)  # only past a row's end
        return torch.stack([hints, digits], dim=2).flatten(1), 2 * n

    def instances(self, sizes: Tensor, generator: torch.Generator) -> Instances:
        """Training instances: both operand lengths uniform in ``[min_size, sizes[i]]``."""
        u = torch.rand(2, len(sizes), generator=generator)
        span = (sizes - self.min_size + 1).float()
        la = self.min_size + (u[0] * span).long()
        top = torch.tensor([self.second_max(int(s)) for s in sizes])
        lb = self.min_size + (u[1] * (top - self.min_size + 1).float()).long()
        return self.operands(la, lb, generator)

    def make(self, sizes: Tensor, length: int, generator: torch.Generator) -> Batch:
        width = self.tokens_for(int(sizes.max()))
        return assemble(self.instances(sizes, generator), width, self.pad, self.bos, self.sep)

    def train_batch(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        return self.make(torch.full((batch_size,), length), length, generator)

    def eval_set(self, length: int, num_sequences: int, seed: int) -> Batch:
        """Eval instances at ``length`` digits: one operand exactly ``length`` digits long."""
        gen = eval_generator(seed, length)
        n = num_sequences
        full = torch.full((n,), length)
        top = self.second_max(length)
        other = self.min_size + (torch.rand(n, generator=gen) * (top - self.min_size + 1)).long()
        if self.op == "add":  # either operand may be the long one
            swap = torch.rand(n, generator=gen) < 0.5
            la, lb = torch.where(swap, other, full), torch.where(swap, full, other)
        else:
            la, lb = full, other
        inst = self.operands(la, lb, gen)
        return assemble(inst, self.tokens_for(length), self.pad, self.bos, self.sep)

    # -- structure -------------------------------------------------------------------------

    def structure(self, inputs: Tensor) -> TokenStructure:
        """Roles, numbers and significances of ``inputs [b, s]``, read from the tokens."""
        is_digit = inputs < BASE
        is_hint = (inputs >= self.first_hint) & (inputs < self.num_tokens)
        is_op, is_sep = inputs == self.operator, inputs == self.sep
        boundary = is_op | is_sep
        number = boundary.long().cumsum(1)  # 0: first operand; 1: second; 2: answer
        seen = is_digit.long().cumsum(1)  # digits up to and including each token
        base = torch.where(boundary, seen, 0).cummax(1).values  # digits before this number
        significance = torch.where(is_digit, seen - base - 1, -1)
        significance = torch.where(is_hint, seen - base, significance)  # the digit it precedes
        answer = number >= 2
        role = torch.full_like(inputs, TokenStructure.ROLE_OTHER)
        role = torch.where(is_digit, TokenStructure.ROLE_OPERAND, role)
        role = torch.where(is_digit & answer, TokenStructure.ROLE_ANSWER, role)
        role = torch.where(is_hint, TokenStructure.ROLE_HINT, role)
        role = torch.where(is_op, TokenStructure.ROLE_OPERATOR, role)
        role = torch.where(is_sep, TokenStructure.ROLE_ANSWER_START, role)
        in_number = is_digit | is_hint | is_sep
        return TokenStructure(torch.where(in_number, number, -1), significance, role)

    def sequence_metrics(self, data: Batch, correct: Tensor) -> dict[str, float]:
        """``operand_grid``: exact match per operand-length pair, as JSON
        ``{"la,lb": [exact, sequences]}`` (the papers' heatmap; ``posx report --plot``)."""
        st = self.structure(data.inputs)
        digit = st.role == TokenStructure.ROLE_OPERAND
        la = (digit & (st.number == 0)).sum(1)
        lb = (digit & (st.number == 1)).sum(1)
        grid: dict[str, list[int]] = {}
        for a, b, ok in zip(la.tolist(), lb.tolist(), correct.tolist(), strict=True):
            cell = grid.setdefault(f"{a},{b}", [0, 0])
            cell[0] += int(ok)
            cell[1] += 1
        return {"operand_grid": json.dumps(grid, sort_keys=True)}  # type: ignore[dict-item]

    def describe(self) -> dict[str, object]:
        return {
            **super().describe(),
            "length_unit": self.length_unit,
            "op": self.op,
            "index_hints": self.index_hints,
        }
