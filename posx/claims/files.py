"""Claims files (``configs/claims/NAME.yaml``): read with ``yaml.safe_load`` and checked key by
key, each statement parsed by :func:`posx.claims.language.parse_statement`. A bad file is one line
naming the file, the claim and what is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from posx.claims.language import ID, Claim, ClaimError, ClaimsFile, parse_statement

CLAIM_KEYS = ("id", "statement", "table", "published", "published_metric", "note", "paper_scale")
FILE_KEYS = ("paper", "claims", "note", "tuning_seeds")


def _text(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ClaimError(f"{what} must be text, got {type(value).__name__}")
    return str(value)


def _published(value: Any, what: str) -> dict[str, Any]:
    """``{label: number}`` or ``{label: [numbers]}`` (one per published length)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ClaimError(f"{what} must map row labels to numbers or lists of numbers")
    out: dict[str, Any] = {}
    for key, v in value.items():
        items = v if isinstance(v, list) else [v]
        if not items or any(
            isinstance(x, bool) or not isinstance(x, int | float) or x != x for x in items
        ):
            raise ClaimError(f"{what}[{key}] must be a number or a list of numbers, got {v!r}")
        out[str(key)] = [float(x) for x in items] if isinstance(v, list) else float(v)
    return out


def _seeds(value: Any, what: str) -> tuple[int, ...]:
    """``[0, 1, 2]``: distinct non-negative whole numbers (an empty list names none)."""
    if value is None:
        return ()
    items = value if isinstance(value, list) else None
    if items is None or any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in items):
        raise ClaimError(f"{what} must be a list of seeds (whole numbers >= 0), got {value!r}")
    if len(set(items)) < len(items):
        raise ClaimError(f"{what} names a seed twice: {value!r}")
    return tuple(sorted(items))


def parse_claims(data: Any, path: Path, experiment: str) -> ClaimsFile:
    """A claims file's content (plain YAML data) as a :class:`ClaimsFile`.

    Raises:
        ClaimError: One line naming the file, the claim and what is allowed.
    """
    if not isinstance(data, dict):
        raise ClaimError(f"{path}: a mapping with keys {', '.join(FILE_KEYS)} was expected")
    unknown = [str(k) for k in data if k not in FILE_KEYS]
    if unknown:
        raise ClaimError(f"{path}: unknown key {unknown[0]!r}; allowed: {', '.join(FILE_KEYS)}")
    items = data.get("claims")
    if not isinstance(items, list) or not items:
        raise ClaimError(f"{path}: 'claims' must be a non-empty list of claims")
    claims: list[Claim] = []
    for n, item in enumerate(items, 1):
        where = f"{path}: claim {n}"
        if not isinstance(item, dict):
            raise ClaimError(f"{where}: a mapping with keys {', '.join(CLAIM_KEYS)} was expected")
        ident = item.get("id")
        if not isinstance(ident, str) or not ID.fullmatch(ident):
            raise ClaimError(f"{where}: 'id' must be a name (letters, digits, _ . -)")
        where = f"{path}: claim {ident!r}"
        unknown = [str(k) for k in item if k not in CLAIM_KEYS]
        if unknown:
            raise ClaimError(
                f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(CLAIM_KEYS)}"
            )
        if any(c.id == ident for c in claims):
            raise ClaimError(f"{where}: the id is used twice")
        statement = item.get("statement")
        if not isinstance(statement, str):
            raise ClaimError(f"{where}: 'statement' must be text, e.g. 'alibi ×r <= 1.02 at 4x'")
        claims.append(
            Claim(
                ident,
                parse_statement(statement, where),
                _text(item.get("table"), f"{where}: 'table'"),
                _published(item.get("published"), f"{where}: 'published'"),
                _text(item.get("published_metric"), f"{where}: 'published_metric'"),
                _text(item.get("note"), f"{where}: 'note'"),
                _text(item.get("paper_scale"), f"{where}: 'paper_scale'"),
            )
        )
    paper = _text(data.get("paper"), f"{path}: 'paper'")
    if not paper:
        raise ClaimError(f"{path}: 'paper' must name the paper the claims come from")
    return ClaimsFile(
        experiment, path, paper, tuple(claims), _text(data.get("note"), "note"),
        _seeds(data.get("tuning_seeds"), f"{path}: 'tuning_seeds'"),
    )  # fmt: skip


def load_claims(path: Path, experiment: str | None = None) -> ClaimsFile:
    """Reads and parses one claims file (``yaml.safe_load``: plain values only).

    Raises:
        ClaimError: Unreadable, not YAML, or not the language.
    """
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ClaimError(f"cannot read claims file {path}: {first}") from err
    return parse_claims(data, path, experiment or path.stem)
