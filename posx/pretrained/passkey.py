"""Zero-shot passkey retrieval, scored under teacher forcing.

The test YaRN, LongLoRA and LCEG report: a random 5-digit number is hidden at a depth of
repeated filler text, and the prompt ends by asking for it (Mohtashami and Jaggi 2023's
wording). Nothing is generated: the prompt with the key appended is read once, and the key's
tokens are scored as targets: exact match (every key token is the argmax) and their loss. A
prompt fills at most ``L`` tokens of the model's tokenizer; depth ``d`` puts the needle after a
fraction ``d`` of the filler. Each (length, variant) is one ``eval.csv`` row of task
``passkey``: ``exact_match`` and ``loss`` over every depth and trial, and ``exact_depth_P`` /
``loss_depth_P`` per depth (``P`` in percent), so a model's usable context is one table.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from posx.evaluation.memory import PeakMemory
from posx.pretrained.evaluate import CausalLM, position_limit, unsupported
from posx.pretrained.scaling import Scaler, Variant, describe

FILLER = (
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
)
NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key. "
QUESTION = "What is the pass key? The pass key is "
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class Prompt:
    """One passkey prompt: token ids ``[t]``, the indices of the key's tokens, and how many
    filler units stand before the needle (``before``) out of ``filler``."""

    ids: torch.Tensor
    answer: list[int]
    before: int = 0
    filler: int = 0


def build_prompt(tokenizer: Any, length: int, depth: float, key: str) -> Prompt | None:
    """The longest prompt of at most ``length`` tokens with the needle at ``depth``, or None
    when even a prompt without filler is longer."""
    unit = len(tokenizer(FILLER, add_special_tokens=False)["input_ids"])
    fixed = len(tokenizer(NEEDLE.format(key=key) + QUESTION + key)["input_ids"])
    n = max(0, (length - fixed) // max(unit, 1) + 1)
    while n >= 0:
        before = round(n * depth)
        text = FILLER * before + NEEDLE.format(key=key) + FILLER * (n - before) + QUESTION
        start = len(text)
        enc = tokenizer(text + key, return_offsets_mapping=True, verbose=False)
        if len(enc["input_ids"]) <= length:
            answer = [
                i for i, (a, b) in enumerate(enc["offset_mapping"]) if b > start and a < b and i
            ]
            return Prompt(torch.tensor(enc["input_ids"]), answer, before, n)
        n -= 1
    return None


def keys(count: int, seed: int) -> list[str]:
    """``count`` random 5-digit keys, the same for every model at a seed."""
    g = torch.Generator().manual_seed(seed)
    return [str(int(k)) for k in torch.randint(10_000, 100_000, (count,), generator=g)]


@torch.inference_mode()
def _score(scorer: CausalLM, prompt: Prompt, device: torch.device) -> tuple[bool, float, int]:
    """(every key token right, summed loss of the key tokens, key tokens)."""
    logits = scorer(prompt.ids[None].to(device))[0].float()  # [t, vocab]
    where = torch.tensor(prompt.answer)
    pred, target = logits[where - 1], prompt.ids[where].to(device)
    loss = F.cross_entropy(pred, target, reduction="sum")
    return bool((pred.argmax(-1) == target).all()), float(loss), len(where)


def evaluate_passkey(
    model: torch.nn.Module,
    tokenizer: Any,
    lengths: list[int],
    variants: list[Variant],
    trained: int,
    device: torch.device,
    trials: int = 5,
    depths: tuple[float, ...] = DEPTHS,
    seed: int = 0,
    on_length: Any = None,
) -> list[dict[str, Any]]:
    """Passkey rows: one per variant and length (see the module docstring).

    Args:
        model: The causal LM on ``device``.
        tokenizer: Its tokenizer.
        lengths: Prompt lengths (at most, in its tokens).
        variants: Eval-time scalings.
        trained: Its trained context.
        device: Where it runs.
        trials: Keys per depth.
        depths: Needle depths in ``[0, 1]``.
        seed: Seeds the keys.
        on_length: Called with each finished row.

    Returns:
        The rows.
    """
    scaler, scorer = Scaler(model, trained), CausalLM(model)
    limit = position_limit(model, scaler.rope)
    rows = []
    for variant in variants:
        reason = scaler.unsupported_reason(variant)
        params = None if reason else scaler.apply(variant)
        for length in lengths:
            row: dict[str, Any] = {
                "eval_length": length,
                "mode": "full",
                "window": length,
                "stride": length,
                "overrides": variant.overrides,
                "status": "ok",
                "reason": "",
                "scaling": describe(params),
            }
            why = unsupported(model, reason, limit, length)
            if why:
                row.update(status="unsupported", reason=why)
            else:
                row.update(_length_row(scorer, tokenizer, length, trials, depths, seed, device))
            rows.append(row)
            if on_length is not None:
                on_length(row)
        scaler.apply(Variant())
    return rows


def _depths_unplaceable(
    tokenizer: Any, length: int, depths: tuple[float, ...], key: str
) -> str | None:
    """Why ``length`` cannot tell ``depths`` apart, or None: when the needle, question and key
    nearly fill it, the filler left is too short to put the needle in a different place for
    each depth, and several depths would score one identical prompt as if they differed."""
    prompts = [build_prompt(tokenizer, length, depth, key) for depth in depths]
    if any(p is None or not p.answer for p in prompts):
        return f"a passkey prompt needs more than {length} tokens"
    places = [p.before for p in prompts if p is not None]
    if len(set(places)) == len(places):
        return None
    filler = max(p.filler for p in prompts if p is not None)
    shown = ", ".join(f"{round(d * 100)}%" for d in depths)
    return (
        f"a passkey prompt of {length} tokens holds {filler} filler sentence(s), too few to put "
        f"the needle at depths {shown} in different places; evaluate longer lengths or fewer "
        "passkey.depths"
    )


def _length_row(
    scorer: CausalLM,
    tokenizer: Any,
    length: int,
    trials: int,
    depths: tuple[float, ...],
    seed: int,
    device: torch.device,
) -> dict[str, Any]:
    refused = _depths_unplaceable(tokenizer, length, depths, keys(1, seed * 1_000_003 + length)[0])
    if refused:
        return {"status": "unsupported", "reason": refused}
    start, out = time.perf_counter(), {}
    hits = loss = tokens = longest = 0
    with PeakMemory(device) as mem:
        for depth in depths:
            d_hits = d_loss = d_tokens = 0
            for key in keys(trials, seed * 1_000_003 + length):
                prompt = build_prompt(tokenizer, length, depth, key)
                if prompt is None or not prompt.answer:
                    return {
                        "status": "unsupported",
                        "reason": f"a passkey prompt needs more than {length} tokens",
                    }
                hit, nats, n = _score(scorer, prompt, device)
                d_hits, d_loss, d_tokens = d_hits + hit, d_loss + nats, d_tokens + n
                longest = max(longest, len(prompt.ids))
            name = f"{round(depth * 100)}"
            out[f"exact_depth_{name}"] = d_hits / trials
            out[f"loss_depth_{name}"] = d_loss / d_tokens
            hits, loss, tokens = hits + d_hits, loss + d_loss, tokens + d_tokens
    seconds = time.perf_counter() - start
    return {
        "loss": loss / tokens,
        "ppl": math.exp(min(loss / tokens, 80.0)),
        "exact_match": hits / (trials * len(depths)),
        "tokens": tokens,
        "sequences": trials * len(depths),
        "max_context": longest,
        "seconds": seconds,
        "chance": 1e-5,  # a uniform guess of a 5-digit key
        "peak_mem_mb": mem.peak_mb,
        **out,
    }
