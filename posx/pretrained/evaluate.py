"""A pretrained model's eval rows: posx's protocols (:mod:`posx.evaluation.protocol`) over the
held-out text in the model's tokens, per length and variant.

The model is wrapped so :func:`posx.evaluation.protocol.score` reads it as it reads posx's own
models (token ids in, logits out), so full and sliding modes, per-position loss and every metric
are computed by the same code. Bits per byte divide by the bytes the scored tokens stand for
(:mod:`posx.pretrained.text`). A length a model's positions cannot reach (GPT-2's learned table)
is an ``unsupported`` row, as for posx's ``learned`` encoding.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from posx.errors import PosxError
from posx.evaluation.buckets import bucket_rows
from posx.evaluation.memory import PeakMemory
from posx.evaluation.protocol import Protocol, resolve_protocol, score
from posx.evaluation.sweep import metrics
from posx.pretrained.scaling import Scaler, Variant, describe
from posx.pretrained.text import HeldOut
from posx.tasks.text import UnsupportedLength, sequences_for


class CausalLM(torch.nn.Module):
    """A ``transformers`` causal LM as posx's scorer calls a model: ``(ids, pos) -> logits``.

    Args:
        model: The causal LM.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, inputs: Tensor, pos: Tensor | None = None) -> Tensor:
        """Logits ``[b, s, vocab]`` for token ids ``[b, s]`` at positions ``pos`` (default
        ``0..s-1``); no cache is kept (each window is scored once)."""
        if pos is not None and pos.dim() == 1:
            pos = pos.unsqueeze(0).expand_as(inputs)
        return self.model(input_ids=inputs, position_ids=pos, use_cache=False).logits


def position_limit(model: torch.nn.Module, rope: bool) -> int | None:
    """The longest window a model's positions reach: its learned position table's size for a
    model without RoPE that has one (GPT-2's ``wpe``), else None (no limit)."""
    if rope:
        return None
    limit = getattr(model.config, "max_position_embeddings", None)
    tokens = model.get_input_embeddings()
    tables = [m for m in model.modules() if isinstance(m, torch.nn.Embedding) and m is not tokens]
    return int(limit) if limit and tables else None


def unsupported(model: torch.nn.Module, reason: str, limit: int | None, window: int) -> str:
    """Why a window of ``window`` tokens cannot be read (``""`` when it can): the variant's
    ``reason``, or a learned position table shorter than the window."""
    if reason or limit is None or window <= limit:
        return reason
    return f"{model.config.model_type} has learned positions for {limit} tokens only"


@dataclass
class Settings:
    """How a pretrained model is evaluated (``eval.*`` settings of ``posx eval hf:...``).

    Attributes:
        lengths: Eval lengths in the model's tokens.
        mode: ``full`` or ``sliding``.
        window: Sliding window (default: the model's trained context).
        stride: Sliding stride (default: half the window).
        tokens: Tokens per length (``eval.tokens``).
        batch_tokens: Tokens per forward pass (``eval.batch_tokens``).
        buckets: Per-position buckets (``log`` or a width).
        variants: Eval-time scalings.
    """

    lengths: list[int]
    mode: str = "full"
    window: int | None = None
    stride: int | None = None
    tokens: int = 16384
    batch_tokens: int = 8192
    buckets: str | int = "log"
    variants: list[Variant] = field(default_factory=lambda: [Variant()])


def _row(length: int, proto: Protocol, variant: Variant) -> dict[str, Any]:
    return {
        "eval_length": length,
        "mode": proto.mode,
        "window": proto.window,
        "stride": proto.stride,
        "overrides": variant.overrides,
        "status": "ok",
        "reason": "",
    }


def evaluate_text(
    model: torch.nn.Module,
    text: HeldOut,
    settings: Settings,
    trained: int,
    device: torch.device,
    on_length: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Eval rows (one per variant and length) and per-position bucket rows.

    Args:
        model: The loaded causal LM, on ``device``.
        text: The held-out text in its tokens.
        settings: Lengths, protocol and variants.
        trained: The model's trained context (the sliding window's default).
        device: Where the model is.
        on_length: Called with each finished row (a progress line).

    Returns:
        The rows and the bucket rows, each carrying its length, protocol and variant.
    """
    scaler, scorer = Scaler(model, trained), CausalLM(model)
    limit = position_limit(model, scaler.rope)
    rows, buckets = [], []
    for variant in settings.variants:
        reason = scaler.unsupported_reason(variant)
        params = None if reason else scaler.apply(variant)
        for length in settings.lengths:
            s = settings
            proto = resolve_protocol(s.mode, length, s.window, s.stride, trained)
            row = _row(length, proto, variant) | {"scaling": describe(params)}
            why = unsupported(model, reason, limit, proto.window)
            if why:
                row.update(status="unsupported", reason=why)
            else:
                try:
                    found, tally_rows = _score_length(scorer, text, length, proto, s, device)
                    row.update(found)
                    keys = {k: row[k] for k in ("eval_length", "mode", "window", "stride")}
                    buckets += [{**keys, **b, "overrides": variant.overrides} for b in tally_rows]
                except UnsupportedLength as err:
                    row.update(status="unsupported", reason=str(err).splitlines()[0][:300])
                except (RuntimeError, ValueError, PosxError) as err:  # e.g. out of memory
                    row.update(status="failed", reason=str(err).strip().splitlines()[0][:300])
            rows.append(row)
            if on_length is not None:
                on_length(row)
        scaler.apply(Variant())
    return rows, buckets


class _Text:
    """What :func:`posx.evaluation.sweep.metrics` asks of a task: text has no exact match."""

    exact_match = False


@torch.inference_mode()
def _score_length(
    scorer: CausalLM,
    text: HeldOut,
    length: int,
    proto: Protocol,
    settings: Settings,
    device: torch.device,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    data, nbytes = text.windows(length, sequences_for(settings.tokens, length))
    start = time.perf_counter()
    with PeakMemory(device) as mem:
        tally = score(scorer, data, proto, settings.batch_tokens, device)
    row = metrics(tally, _Text(), time.perf_counter() - start, nbytes)
    row.update(peak_mem_mb=mem.peak_mb, mem_delta_mb=mem.delta_mb, chance=math.nan)
    return row, bucket_rows(tally, settings.buckets)
