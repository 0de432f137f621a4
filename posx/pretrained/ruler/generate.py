"""Greedy generation in batches with a KV cache: what a RULER prompt gets from the model.

Prompts of one batch are left-padded to the longest (the model's attention mask hides the
padding and ``generate`` counts positions from the first real token); each continues for at
most the task's budget of new tokens and stops at an end-of-sequence token. Prompts are sorted
by length so a batch pads little. A model-free ``generate`` callable with the same signature
(token ids in, new token ids out) stands in for a model in the tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

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


def greedy(
    model: torch.nn.Module, tokenizer: Any, device: torch.device, batch_tokens: int
) -> Generate:
    """A :data:`Generate` over ``model``: greedy, ``batch_tokens // longest prompt`` prompts
    at a time (at least one), KV cache on.

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

    @torch.inference_mode()
    def run(prompts: Sequence[Sequence[int]], budget: int) -> list[list[int]]:
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        out: list[list[int]] = [[] for _ in prompts]
        start = 0
        while start < len(order):
            width = len(prompts[order[start]]) + budget
            size = max(1, batch_tokens // max(width, 1))
            chunk = order[start : start + size]
            longest = max(len(prompts[i]) for i in chunk)
            ids = torch.full((len(chunk), longest), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), longest), dtype=torch.long)
            for row, i in enumerate(chunk):
                n = len(prompts[i])
                ids[row, longest - n :] = torch.tensor(list(prompts[i]), dtype=torch.long)
                mask[row, longest - n :] = 1
            new = model.generate(
                input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=budget,
                do_sample=False, num_beams=1, pad_token_id=pad, eos_token_id=ends or None,
                use_cache=True, temperature=None, top_p=None, top_k=None,
            )[:, longest:]  # fmt: skip
            for row, i in enumerate(chunk):
                out[i] = cut_at_end(new[row].tolist(), ends)
            start += len(chunk)
        return out

    return run
