"""The haystack size that fills a length: the largest size whose prompt, plus the tokens the
model may generate, is at most ``L`` tokens of the model's own tokenizer.

The search is over whole haystack units and never trusts an estimate: it returns a size ``s``
it has seen fit while ``s + 1`` was seen not to (or ``s`` is the largest size the task allows),
so the prompt is within one unit of the length even where adding a unit changes how the
neighbouring text tokenizes. It gallops from a hint (the previous sample's size) by doubling
steps, then halves the bracket: a few token counts per sample.
"""

from __future__ import annotations

from collections.abc import Callable


def largest(
    tokens: Callable[[int], int], limit: int, low: int = 0, hint: int | None = None
) -> int | None:
    """The largest size ``s >= low`` with ``tokens(s) <= limit`` at the edge of what fits.

    Args:
        tokens: Tokens of the prompt with a haystack of the given size (plus any budget).
        limit: The most tokens allowed.
        low: The smallest size the task allows.
        hint: A size to start from (default ``low``).

    Returns:
        ``s`` with ``tokens(s) <= limit < tokens(s + 1)``, or None when even ``low`` does not fit.
    """
    seen: dict[int, int] = {}

    def fits(size: int) -> bool:
        if size not in seen:
            seen[size] = tokens(size)
        return seen[size] <= limit

    start = max(low, hint if hint is not None else low)
    if fits(start):
        good, step = start, 1
        while fits(good + step):
            good, step = good + step, step * 2
        bad = good + step
    else:
        bad, step = start, 1
        while bad - step > low and not fits(bad - step):
            bad, step = bad - step, step * 2
        good = max(low, bad - step)
        if not fits(good):
            return None
    while bad - good > 1:
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return good
