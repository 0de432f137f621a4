"""Greedy generation in batches with a KV cache: what a RULER prompt gets from the model.

Prompts of one batch are left-padded to the longest (the attention mask hides the padding and
positions count from each prompt's first real token); each continues for at most the task's
budget of new tokens and stops at an end-of-sequence token. Prompts are sorted
by length so a batch pads little. A model-free ``generate`` callable with the same signature
(token ids in, new token ids out) stands in for a model in the tests.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from posx.runtime.distributed import World
from posx.runtime.outcomes import gather_outcomes

Generate = Callable[[Sequence[Sequence[int]], int], list[list[int]]]


def end_ids(model: torch.nn.Module, tokenizer: Any) -> list[int]:
    """Token ids that end an answer: the model's and the tokenizer's end-of-sequence ids."""
    found = getattr(model.generation_config, "eos_token_id", None)
    ids = found if isinstance(found, list) else [found]
    ids = [*ids, tokenizer.eos_token_id]
    return sorted({int(i) for i in ids if i is not None})


def cut_at_end(ids: Sequence[int], ends: Sequence[int]) -> list[int]:
    """``ids`` up to (not including) the first end id."""
    out = []
    for i in ids:
        if i in ends:
            break
        out.append(int(i))
    return out


def _forward_names(model: torch.nn.Module) -> tuple[str, dict[str, int]]:
    """The cache argument's name of this ``transformers`` version's forward, and the argument
    that keeps only the last position's logits (a prompt's full logits would be
    ``L x vocab`` numbers), where the model takes one."""
    names = inspect.signature(model.forward).parameters
    cache = "cache" if "cache" in names else "past_key_values"
    for keep in ("logits_to_keep", "num_logits_to_keep"):
        if keep in names:
            return cache, {keep: 1}
    return cache, {}


def greedy(
    model: torch.nn.Module, tokenizer: Any, device: torch.device, batch_tokens: int
) -> Generate:
    """A :data:`Generate` over ``model``: greedy, ``batch_tokens // (longest prompt + budget)``
    prompts at a time (at least one), KV cache on.

    The loop is posx's own (a forward over the prompts, then one token per step with the
    cache): ``transformers``' ``generate`` spent 4-7 times as long per step on a small model
    at 2k tokens. Positions count from each prompt's first real token, as ``generate``'s do.

    Args:
        model: A causal LM on ``device`` (or spread by a device map; inputs go to its first
            device).
        tokenizer: Its tokenizer (pad and end ids).
        device: Where inputs go.
        batch_tokens: Tokens a batch may hold (prompts and budget).

    Returns:
        The callable.
    """
    ends = end_ids(model, tokenizer)
    pad = tokenizer.pad_token_id
    pad = pad if pad is not None else (ends[0] if ends else 0)
    cache_name, keep = _forward_names(model)

    @torch.inference_mode()
    def batch(ids: Tensor, mask: Tensor, budget: int) -> list[list[int]]:
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **keep)
        cache, last = out.past_key_values, pos[:, -1:]
        token = out.logits[:, -1].argmax(-1)
        stop = torch.tensor(ends, device=ids.device, dtype=token.dtype)
        done = torch.zeros_like(token, dtype=torch.bool)
        said = []
        for step in range(budget):
            said.append(token)
            done |= torch.isin(token, stop)
            if step == budget - 1 or bool(done.all()):
                break
            mask = torch.cat([mask, mask.new_ones((len(mask), 1))], dim=1)
            last = last + 1
            out = model(input_ids=token[:, None], attention_mask=mask, position_ids=last,
                        use_cache=True, **{cache_name: cache}, **keep)  # fmt: skip
            cache, token = out.past_key_values, out.logits[:, -1].argmax(-1)
        return torch.stack(said, dim=1).tolist()

    def run(prompts: Sequence[Sequence[int]], budget: int) -> list[list[int]]:
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        out: list[list[int]] = [[] for _ in prompts]
        start = 0
        while start < len(order):
            width = len(prompts[order[start]]) + budget
            chunk = order[start : start + max(1, batch_tokens // max(width, 1))]
            longest = max(len(prompts[i]) for i in chunk)
            ids = torch.full((len(chunk), longest), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), longest), dtype=torch.long)
            for row, i in enumerate(chunk):
                n = len(prompts[i])
                ids[row, longest - n :] = torch.tensor(list(prompts[i]), dtype=torch.long)
                mask[row, longest - n :] = 1
            for row, new in zip(chunk, batch(ids.to(device), mask.to(device), budget), strict=True):
                out[row] = cut_at_end(new, ends)
            start += len(chunk)
        return out

    return run


def sharded(generate: Generate, w: World) -> Generate:
    """``generate`` split over the processes of ``w`` (``torchrun``): this one answers prompts
    ``rank, rank + size, ...`` and every process gets every answer back, so all of them score
    the same samples; greedy answers do not depend on the split. An error in one process's
    part (out of memory) is raised in every process, named in the others
    (:func:`~posx.runtime.outcomes.gather_outcomes`), so all of them fail the same task and
    meet at the next one's gather."""
    if not w.distributed:
        return generate

    def run(prompts: Sequence[Sequence[int]], budget: int) -> list[list[int]]:
        mine = list(range(w.rank, len(prompts), w.size))

        def answer() -> list[tuple[int, list[int]]]:
            said = generate([prompts[i] for i in mine], budget) if mine else []
            return list(zip(mine, said, strict=True))

        out: list[list[int]] = [[] for _ in prompts]
        for part in gather_outcomes(answer, w):
            for i, new in part:
                out[i] = new
        return out

    return run
