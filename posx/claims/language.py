"""The claim language: what a preset says its runs will show, parsed by a small grammar.

A preset ``configs/experiment/NAME.yaml`` declares its claims in ``configs/claims/NAME.yaml``
(or ``DIR/claims/NAME.yaml`` in a user's config dir)::

    paper: Press et al. 2022, Train Short, Test Long (ALiBi)
    claims:
      - id: ordering_4x
        table: Table 2
        statement: sinusoidal > rope > t5 >= alibi at 4x by bpb
        published: {sinusoidal: 132.41, rope: 31.58, t5: 20.41, alibi: 18.41}
        published_metric: perplexity at 2512 tokens, trained at 512
        note: why the CPU-scale version may differ
        paper_scale: the overrides that run it at the paper's scale
    tuning_seeds: [0, 1, 2]   # optional: the seeds that chose the preset's settings

``tuning_seeds`` names the seeds whose runs were looked at while the preset's settings were
chosen; ``posx check`` judges the claims on the other seeds only (a claim fitted to the seeds
that judge it says nothing), unless asked to include them.

A statement is whitespace-separated tokens::

    statement := ["mrr:" | "effective_length:"] term (op term)+ clause*
    term      := NUMBER | NAME ["×r" | "xr"] ["@" (Nx | N× | L=N)] [("+" | "-") NUMBER]
    op        := ">" | ">=" | "≥" | "<" | "<=" | "≤"
    clause    := "at" (Nx | N× | L=N) | "by" METRIC | "on" TASK

NAME is a row label as ``posx report`` shows it (``rope``, ``rope+yarn×4``, ``rope+randomized``;
``x`` may stand for ``×``). Comparisons are of the metric's values: ``sinusoidal > rope ... by
bpb`` says sinusoidal's bits per byte are the larger (worse). ``NAME ×r`` is the run's value
relative to its own value at the training length, both in the table's unit (the report's
``×r``: of exact match above chance where the task has a chance level). ``at 4x`` is four times
each run's training length (``at L=256`` an absolute length); ``by`` defaults to the report's
metric for the task; ``on`` names the task when the preset has several. A term may be read at
its own length, ``NAME @1x`` (at its training length) or ``NAME @L=64``, so a statement can ask
whether an extended model at 256 reaches its base's quality at 64: ``rope+pi+ft@256 <= rope @1x
at L=256 by bpb``; and it may carry a margin, ``A <= B + 0.1`` (A is at most 0.1 above B: the
papers' "comparable"), applied to the mean and to each seed's value alike. ``mrr:`` compares mean
reciprocal ranks across every task of the preset (``posx report``'s ranking, on the lengths past
training), so it takes no ``at``, ``on`` or ``×r``. ``effective_length:`` compares RULER's
effective lengths (the longest evaluated length whose ``ruler/average`` score, and every shorter
one's, reaches the threshold the rows record): ``effective_length: llama+yarn×4 >= 4096``; it
takes no ``at``, ``by``, ``×r`` or ``@`` (``on ruler`` may be said).

Nothing here evaluates text or builds objects: a claims file is YAML of plain values, and a
statement is split into tokens that must each fit the grammar.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posx.errors import ConfigError

OPS = {">": ">", ">=": ">=", "≥": ">=", "<": "<", "<=": "<=", "≤": "<="}
TOKEN = re.compile(r">=|<=|≥|≤|>|<|[^\s<>≥≤]+")
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.+×=@\-]*")  # @: extensions, rope+yarn×4+ft@256
NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
FACTOR = re.compile(r"(\d+(\.\d+)?)[x×]")  # 4x, 1.5x
ABSOLUTE = re.compile(r"L=(\d+)")
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TASK = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z0-9_]+)?")  # RULER's are ruler/<name>
ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
RATIO_MARKS = ("×r", "xr")
CLAUSES = ("at", "by", "on")
EFFECTIVE = "effective_length:"
EFFECTIVE_TASK = "ruler/average"  # the rows an effective length is read from
GRAMMAR = (
    "['mrr:'|'effective_length:'] TERM (OP TERM)+ ['at' Nx|L=N] ['by' METRIC] ['on' TASK], "
    "TERM = NUMBER or NAME ['×r'] ['@Nx'|'@L=N'] ['+'|'-' NUMBER], OP one of > >= ≥ < <= ≤"
)


@dataclass(frozen=True)
class Term:
    """One side of a comparison: a row label (its value, or its ``×r`` ratio) or a number."""

    name: str | None = None
    number: float | None = None
    ratio: bool = False
    factor: float | None = None  # NAME @Nx: read at N times its training length
    length: int | None = None  # NAME @L=N: read at eval length N
    offset: float = 0.0  # NAME + 0.1: a margin added to its value

    @property
    def key(self) -> str:
        """What is measured: the row, ×r and length, without the margin."""
        if self.name is None:
            return f"{self.number:g}"
        text = f"{self.name} ×r" if self.ratio else self.name
        if self.factor is not None:
            return f"{text} @{self.factor:g}x"
        return f"{text} @L={self.length}" if self.length is not None else text

    def __str__(self) -> str:
        if not self.offset:
            return self.key
        return f"{self.key} {'+' if self.offset > 0 else '-'} {abs(self.offset):g}"


@dataclass(frozen=True)
class Statement:
    """A parsed statement: ``terms[i] ops[i] terms[i+1]`` must all hold."""

    text: str
    terms: tuple[Term, ...]
    ops: tuple[str, ...]
    mrr: bool = False
    factor: float | None = None  # at Nx: N times each run's training length (1.5x allowed)
    length: int | None = None  # at L=N: an absolute eval length
    metric: str | None = None  # by METRIC (None: the report's metric for the task)
    task: str | None = None  # on TASK
    effective: bool = False  # effective_length: RULER's effective lengths are compared

    @property
    def names(self) -> list[str]:
        return list(dict.fromkeys(t.name for t in self.terms if t.name is not None))

    def where(self) -> str:
        """``at 4x`` / ``at L=256`` / ``past training`` (mrr) / ``over the lengths evaluated``
        (effective length)."""
        if self.mrr:
            return "past training"
        if self.effective:
            return "over the lengths evaluated"
        return f"at {self.factor:g}x" if self.factor is not None else f"at L={self.length}"


@dataclass(frozen=True)
class Claim:
    """One claim of a preset, with what the paper published for it."""

    id: str
    statement: Statement
    table: str = ""
    published: dict[str, Any] = field(default_factory=dict)
    published_metric: str = ""
    note: str = ""
    paper_scale: str = ""


@dataclass(frozen=True)
class ClaimsFile:
    """A preset's claims file."""

    experiment: str
    path: Path
    paper: str
    claims: tuple[Claim, ...]
    note: str = ""
    # the seeds whose runs chose the preset's settings: its claims are judged on the others
    tuning_seeds: tuple[int, ...] = ()


class ClaimError(ConfigError):
    """A claims file or statement that does not fit the language (one line, naming the file)."""


# Makes the error for a statement that does not fit, naming the statement and the grammar.
Bad = Callable[[str], ClaimError]


def parse_statement(text: str, where: str = "statement") -> Statement:
    """Parses one statement (see the module docstring).

    Args:
        text: The statement, e.g. ``sinusoidal > rope > t5 >= alibi at 4x by bpb``.
        where: What to name in an error (``FILE: claim ID``).

    Raises:
        ClaimError: One line saying which token does not fit and what is allowed.
    """

    def bad(what: str) -> ClaimError:
        return ClaimError(f"{where}: {what} in {text!r}; a statement is {GRAMMAR}")

    tokens = TOKEN.findall(text.strip())
    mrr = bool(tokens) and tokens[0].lower() in ("mrr:", "mrr")
    effective = bool(tokens) and tokens[0].lower() == EFFECTIVE
    if mrr or effective:
        tokens = tokens[1:]
    terms, ops, end = _comparison(tokens, bad)
    _check_comparison(terms, ops, bad)
    clauses = _clauses(tokens[end:], bad)
    if effective:
        _check_effective(clauses, terms, bad)
        return Statement(text.strip(), tuple(terms), tuple(ops), task=EFFECTIVE_TASK,
                         effective=True)  # fmt: skip
    factor, length = _at(clauses, bad)
    _check_clause_names(clauses, bad)
    _check_scope(mrr, clauses, terms, bad)
    return Statement(text.strip(), tuple(terms), tuple(ops), mrr, factor, length,
                     clauses.get("by"), clauses.get("on"))  # fmt: skip


def _comparison(tokens: list[str], bad: Bad) -> tuple[list[Term], list[str], int]:
    """The terms and operators before the first clause, alternating term, op, term, ...

    Returns:
        The terms, the operators (canonical: ``≥`` is ``>=``) and the index of the first token
        after them.
    """
    terms: list[Term] = []
    ops: list[str] = []
    i = 0
    while i < len(tokens) and tokens[i] not in CLAUSES:
        if len(terms) == len(ops):  # a term is due
            term, used = _term(tokens, i, bad)
            terms.append(term)
            i += used
        else:
            ops.append(_op(tokens[i], terms[-1], bad))
            i += 1
    return terms, ops, i


def _term(tokens: list[str], i: int, bad: Bad) -> tuple[Term, int]:
    """The term that starts at ``tokens[i]`` and how many tokens it takes (``NAME ×r @1x + 0.1``
    takes five)."""
    token = tokens[i]
    if NUMBER.fullmatch(token):
        return Term(number=float(token)), 1
    if not NAME.fullmatch(token):
        raise bad(f"{token!r} is neither a row label nor a number")
    joined = token.endswith("×r") and len(token) > 2  # `alibi×r` as `alibi ×r`
    spaced = not joined and i + 1 < len(tokens) and tokens[i + 1] in RATIO_MARKS
    name = token.removesuffix("×r") if joined else token
    j = i + (2 if spaced else 1)
    factor = length = None
    if j < len(tokens) and tokens[j].startswith("@"):
        factor, length = _length(tokens[j][1:], f"'{tokens[j]}' after {name}", bad)
        j += 1
    offset = 0.0
    if j < len(tokens) and tokens[j] in ("+", "-"):
        if j + 1 >= len(tokens) or not NUMBER.fullmatch(tokens[j + 1]):
            raise bad(f"'{tokens[j]}' after {name} needs a number (a margin: {name} + 0.1)")
        offset = float(tokens[j + 1]) * (1 if tokens[j] == "+" else -1)
        j += 2
    term = Term(_canonical(name), ratio=joined or spaced, factor=factor, length=length,
                offset=offset)  # fmt: skip
    return term, j - i


def _op(token: str, before: Term, bad: Bad) -> str:
    """The comparison ``token`` stands for (``≥`` is ``>=``); ``before`` is the term before it."""
    if token not in OPS:
        raise bad(f"expected a comparison (> >= ≥ < <= ≤) after {before}, got {token!r}")
    return OPS[token]


def _check_comparison(terms: list[Term], ops: list[str], bad: Bad) -> None:
    """Refuses a comparison that says nothing about a row: one term, a trailing operator, or
    numbers compared with numbers."""
    if len(terms) < 2 or len(terms) == len(ops):
        raise bad("a statement compares at least two terms (A > B)")
    if all(t.name is None for t in terms):
        raise bad("a statement needs at least one row label")
    for a, b in zip(terms, terms[1:], strict=False):
        if a.name is None and b.name is None:
            raise bad(f"{a} and {b} are both numbers")


def _clauses(rest: list[str], bad: Bad) -> dict[str, str]:
    """The clauses after the comparison as ``{keyword: value}``, each keyword at most once."""
    clauses: dict[str, str] = {}
    for k in range(0, len(rest), 2):
        key, value = rest[k], rest[k + 1] if k + 1 < len(rest) else None
        if key not in CLAUSES:
            raise bad(f"unexpected {key!r} (clauses are: at Nx, at L=N, by METRIC, on TASK)")
        if value is None or key in clauses:
            raise bad(f"'{key}' needs one value" if value is None else f"'{key}' given twice")
        clauses[key] = value
    return clauses


def _at(clauses: dict[str, str], bad: Bad) -> tuple[float | None, int | None]:
    """The ``at`` clause as (factor, length): ``at 4x`` is (4, None), ``at L=256`` (None, 256),
    no clause (None, None)."""
    if "at" not in clauses:
        return None, None
    return _length(clauses["at"], f"'at {clauses['at']}'", bad)


def _length(value: str, what: str, bad: Bad) -> tuple[float | None, int | None]:
    """``4x`` as (4, None), ``1.5x`` as (1.5, None), ``L=256`` as (None, 256)."""
    if FACTOR.fullmatch(value) and float(value[:-1]) >= 1:
        return float(value[:-1]), None
    if ABSOLUTE.fullmatch(value) and int(value[2:]) >= 1:
        return None, int(value[2:])
    raise bad(f"{what}: give a multiple of the training length of at least 1 (4x, 1.5x) or L=N")


def _check_clause_names(clauses: dict[str, str], bad: Bad) -> None:
    """Refuses a ``by`` or ``on`` value that is not a plain name (a metric or task)."""
    for key, word in (("by", WORD), ("on", TASK)):
        if key in clauses and not word.fullmatch(clauses[key]):
            raise bad(f"'{key} {clauses[key]}' is not a metric or task name")


def _check_scope(mrr: bool, clauses: dict[str, str], terms: list[Term], bad: Bad) -> None:
    """Refuses a length, task or ``×r`` on an ``mrr:`` statement (the ranking covers every task
    past training), and a plain statement without a length."""
    own = any(t.ratio or t.factor or t.length or t.offset for t in terms)
    if mrr and ("at" in clauses or "on" in clauses or own):
        raise bad(
            "an mrr: statement ranks every task past training; no 'at', 'on', '×r', '@' or margin"
        )
    if not mrr and "at" not in clauses:
        raise bad("say at which length: 'at 4x' (times the training length) or 'at L=256'")


def _check_effective(clauses: dict[str, str], terms: list[Term], bad: Bad) -> None:
    """Refuses what an ``effective_length:`` statement cannot take: a length (it is read over
    every length evaluated), a metric (RULER's average score decides), a task other than
    RULER's, ``×r`` or a term's own length."""
    if "at" in clauses or "by" in clauses or any(t.ratio or t.factor or t.length for t in terms):
        raise bad(
            "an effective_length: statement reads every length evaluated by RULER's average "
            "score; no 'at', 'by', '×r' or '@'"
        )
    if clauses.get("on", "ruler") not in ("ruler", EFFECTIVE_TASK):
        raise bad(f"an effective_length: statement is on ruler, not on {clauses['on']!r}")


def _canonical(name: str) -> str:
    # `rope+yarnx4` is the report's `rope+yarn×4`; an `x` not before a number stays (xpos)
    return re.sub(r"(?<=[A-Za-z_])x(?=\d)", "×", name)
