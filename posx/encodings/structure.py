"""Per-token structure of a task's sequences: which number a token belongs to, its digit
significance, its role.

Tasks that know their format report it (:meth:`posx.tasks.base.Task.structure`) and position
strategies read it (:mod:`posx.positions`), so neither names the other. It lives at the
encodings layer, the lowest that both may import: like ``pos``, it is an input that decides
positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class TokenStructure:
    """What each token of a sequence is, for position strategies that use a task's structure.

    Tasks that know their format (arithmetic) report it next to the tokens, so a strategy
    (position coupling, Abacus) reads roles and significances instead of the task's name.

    Attributes:
        number: Int ``[b, s]``: which number the token belongs to (0, 1, ... for the operands in
            the order written, then the answer); -1 for tokens outside every number.
        significance: Int ``[b, s]``: the digit's significance within its number (0 = units);
            -1 for non-digits, except the token that starts the answer (``ANSWER_START``),
            which stands just below the answer's units digit.
        role: Int ``[b, s]``: one of the ``ROLE_*`` codes of this class.
    """

    number: Tensor
    significance: Tensor
    role: Tensor

    #: BOS, padding and anything else without a role.
    ROLE_OTHER = 0
    #: A digit of an operand.
    ROLE_OPERAND = 1
    #: An operator between operands (``+``, ``*``).
    ROLE_OPERATOR = 2
    #: The separator whose next token is the answer's first digit.
    ROLE_ANSWER_START = 3
    #: A digit of the answer.
    ROLE_ANSWER = 4
    #: An index-hint token (Zhou et al. 2024); its significance is its digit's.
    ROLE_HINT = 5

    @classmethod
    def plain(cls, inputs: Tensor) -> TokenStructure:
        """The structure of a task that reports none: each sequence is one number whose
        ``t``-th token has significance ``t``, so structured strategies reduce to (shifted)
        ``1 .. s`` positions instead of failing."""
        b, s = inputs.shape
        significance = torch.arange(s, device=inputs.device).expand(b, s)
        return cls(
            torch.zeros_like(inputs), significance, torch.full_like(inputs, cls.ROLE_OPERAND)
        )

    @property
    def is_digit(self) -> Tensor:
        """Bool ``[b, s]``: the token is a digit of an operand or of the answer."""
        return (self.role == self.ROLE_OPERAND) | (self.role == self.ROLE_ANSWER)

    @property
    def in_answer(self) -> Tensor:
        """Bool ``[b, s]``: the token predicts an answer token (answer start or answer)."""
        return (self.role == self.ROLE_ANSWER_START) | (self.role == self.ROLE_ANSWER)
