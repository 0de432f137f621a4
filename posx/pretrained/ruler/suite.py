"""RULER on a pretrained model: for each variant and length, every task's samples are answered
by greedy generation and scored as RULER scores them; one ``eval.csv`` row per task
(``ruler/<name>``) and an average row (``ruler/average``) per length, and one row per sample in
the generations file (what the model said, beside the references).

A row says its score (percent), sample count, Wilson 95% interval, the prompts' mean and
largest true token counts and the generation budget, so a 20-sample score is never read as a
500-sample one and every length is what the model really read. A length that a variant or a
learned position table cannot reach is an ``unsupported`` row.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from posx.evaluation.memory import PeakMemory
from posx.pretrained.evaluate import position_limit, unsupported
from posx.pretrained.ruler.generate import Generate
from posx.pretrained.ruler.prompts import Prepared, Prompter
from posx.pretrained.scaling import Scaler, Variant, describe
from posx.ruler import scoring
from posx.ruler.registry import METRIC, task

AVERAGE = "ruler/average"
_UNSEEN = re.compile("[\x00-\x08\x0b-\x1f\x7f\x85\u2028\u2029]")
PREFIX = "ruler/"


@dataclass
class RulerSettings:
    """What ``--suite ruler`` runs (the ``ruler.*`` settings).

    Attributes:
        tasks: Task names.
        samples: Samples per task and length.
        template: ``base`` or ``chat``.
        threshold: Average score the effective length needs (percent).
    """

    tasks: list[str]
    samples: int
    template: str = "base"
    threshold: float = scoring.THRESHOLD


def _row(name: str, length: int, variant: Variant, params: Any) -> dict[str, Any]:
    return {
        "task": PREFIX + name,
        "eval_length": length,
        "mode": "generate",
        "window": length,
        "stride": length,
        "overrides": variant.overrides,
        "scaling": describe(params),
        "status": "ok",
        "reason": "",
    }


def evaluate_ruler(
    model: torch.nn.Module,
    prompter: Prompter,
    prepared: Prepared,
    settings: RulerSettings,
    variants: list[Variant],
    trained: int,
    device: torch.device,
    generate: Generate,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows per variant, length and task (and the average), and one generation row per sample.

    Args:
        model: The causal LM (its rotary embeddings are switched per variant).
        prompter: Its prompts.
        prepared: The samples (:func:`posx.pretrained.ruler.prompts.prepare`).
        settings: Tasks and samples.
        variants: Eval-time scalings.
        trained: The model's trained context.
        device: Where it runs.
        generate: Token ids in, new token ids out (:func:`~posx.pretrained.ruler.generate.greedy`).
        on_row: Called with each finished row.

    Returns:
        The ``eval.csv`` rows and the generation rows.
    """
    scaler = Scaler(model, trained)
    limit = position_limit(model, scaler.rope)
    lengths = sorted({length for _, length in prepared.samples})
    rows: list[dict[str, Any]] = []
    said: list[dict[str, Any]] = []
    for variant in variants:
        reason = scaler.unsupported_reason(variant)
        params = None if reason else scaler.apply(variant)
        for length in lengths:
            why = unsupported(model, reason, limit, length)
            group = []
            with PeakMemory(device) as mem:  # once per length: measuring is not free on a CPU
                for name in settings.tasks:
                    row = _row(name, length, variant, params)
                    if why:
                        row.update(status="unsupported", reason=why)
                    else:
                        try:
                            found, lines = _score_task(prompter, prepared, name, length, generate)
                            row.update(found)
                            said += [{**_keys(row), **line} for line in lines]
                        except (RuntimeError, ValueError) as err:  # e.g. out of memory
                            row.update(status="failed", reason=_first_line(err))
                    group.append(row)
                    if on_row is not None:
                        on_row(row)
            for row in group:
                if row["status"] == "ok":
                    row["peak_mem_mb"] = mem.peak_mb
            rows += group + [_average(group, length, variant, params, settings.threshold)]
            if on_row is not None:
                on_row(rows[-1])
        scaler.apply(Variant())
    return rows, said


def shown(text: str) -> str:
    """``text`` with control characters (but line breaks and tabs) and Unicode line separators
    written as JSON escapes: what the model said, readable, and one CSV cell."""
    return _UNSEEN.sub(lambda m: json.dumps(m.group())[1:-1], text)


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:300]


def _keys(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in ("task", "eval_length", "overrides")}


def _score_task(
    prompter: Prompter,
    prepared: Prepared,
    name: str,
    length: int,
    generate: Generate,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    fitted = prepared.samples[(name, length)]
    budget = task(name).budget
    ids = [prompter.ids(f.sample.input, f.sample.answer_prefix) for f in fitted]
    start = time.perf_counter()
    new = generate(ids, budget)
    seconds = time.perf_counter() - start
    tok = prompter.tokenizer
    predictions = [tok.decode(n, skip_special_tokens=True) for n in new]
    each = [
        scoring.match_all(p, f.sample.outputs) for p, f in zip(predictions, fitted, strict=True)
    ]
    score = round(100 * math.fsum(each) / len(each), 2)
    low, high = scoring.interval(score, len(each))
    row = {
        "score": score,
        "score_low": low,
        "score_high": high,
        "samples": len(each),
        "metric": METRIC,
        "exact_match": sum(e == 1.0 for e in each) / len(each),
        "prompt_tokens": round(sum(len(i) for i in ids) / len(ids), 1),
        "prompt_tokens_max": max(len(i) for i in ids),
        "budget": budget,
        "max_context": max(len(i) for i in ids) + budget,
        "empty": sum(not scoring.clean(p) for p in predictions),
        "seconds": seconds,
        "chance": 0.0,
    }
    depths: dict[str, list[float]] = {}
    for e, f in zip(each, fitted, strict=True):
        if f.sample.depth is not None:
            cell = depths.setdefault(str(f.sample.depth), [0.0, 0])
            cell[0], cell[1] = round(cell[0] + e, 6), cell[1] + 1
    if depths:  # per needle depth: [summed sample scores, samples] (posx report's depth plot)
        row["depth_grid"] = json.dumps(depths, sort_keys=True)
    lines = [
        {
            "index": i,
            "depth": "" if f.sample.depth is None else f.sample.depth,
            "prompt_tokens": len(ids[i]),
            "references": " | ".join(f.sample.outputs),
            "prediction": shown(predictions[i]),
            "score": each[i],
        }
        for i, f in enumerate(fitted)
    ]
    return row, lines


def _average(
    group: list[dict[str, Any]], length: int, variant: Variant, params: Any, threshold: float
) -> dict[str, Any]:
    row = _row("average", length, variant, params)
    # the effective length's threshold, as evaluated: what `posx check` judges it at
    row.update(task=AVERAGE, threshold=threshold)
    done = [r for r in group if r["status"] == "ok"]
    if len(done) < len(group):
        bad = next(r for r in group if r["status"] != "ok")
        row.update(status=bad["status"], reason=f"{bad['task']}: {bad['reason']}")
        return row
    score = round(scoring.average(r["score"] for r in done), 2)
    total = sum(r["samples"] for r in done)
    low, high = scoring.interval(score, total)
    row.update(score=score, score_low=low, score_high=high, samples=total, metric=METRIC,
               tasks=len(done), seconds=sum(r["seconds"] for r in done),
               exact_match=score / 100, chance=0.0)  # fmt: skip
    return row


def effective_length(rows: list[dict[str, Any]], threshold: float) -> dict[str, int | None]:
    """Effective length per variant (its ``overrides``) from the average rows."""
    out: dict[str, dict[int, float]] = {}
    for r in rows:
        if r["task"] == AVERAGE:
            score = r.get("score", math.nan) if r["status"] == "ok" else math.nan
            out.setdefault(r["overrides"], {})[r["eval_length"]] = score
    return {k: scoring.effective_length(v, threshold) for k, v in out.items()}
