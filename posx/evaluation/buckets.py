"""Per-position loss: the scored tokens of an eval length grouped into position buckets.

Position ``t`` is the index of the input token that makes the prediction (0-based), so in
``full`` mode it is also the context size minus one. Bucket specs:

- ``log``: powers of two, ``[0, 1), [1, 2), [2, 4), [4, 8), ...``, the last one ending at ``L``
  (equal resolution per octave: where a model breaks past its training length shows at once);
- an integer ``N``: fixed-width buckets ``[0, N), [N, 2N), ...``.

Buckets without scored tokens (e.g. a copy task's prompt) are left out, so the token-weighted
mean of the bucket losses is exactly the row's loss.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from posx.config.validate import parse_buckets

if TYPE_CHECKING:  # config validation imports this module; keep torch out of that path
    from posx.evaluation.protocol import Tally


def bucket_edges(spec: str | int, length: int) -> list[int]:
    """Edges ``[0, e1, ..., length]`` of the buckets over positions ``[0, length)``."""
    kind = parse_buckets(spec)
    if kind == "log":
        inner, edge = [], 1
        while edge < length:
            inner.append(edge)
            edge *= 2
        return [0, *inner, length]
    assert isinstance(kind, int)
    return [*range(0, length, kind), length]


def bucket_rows(tally: Tally, spec: str | int) -> list[dict[str, Any]]:
    """One dict per non-empty bucket: ``bucket_start``, ``bucket_end``, ``tokens``, ``loss``,
    ``acc``."""
    edges = bucket_edges(spec, len(tally.count))
    rows = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        tokens = int(tally.count[lo:hi].sum())
        if tokens:
            rows.append(
                {
                    "bucket_start": lo,
                    "bucket_end": hi,
                    "tokens": tokens,
                    "loss": float(tally.loss[lo:hi].sum()) / tokens,
                    "acc": int(tally.hits[lo:hi].sum()) / tokens,
                }
            )
    return rows
