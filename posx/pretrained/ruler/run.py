"""``--suite ruler`` inside ``posx eval hf:...``: the samples are prepared (and every bad input
refused) before anything is written, then generated and scored per variant and length.

:mod:`posx.pretrained.run` calls these as it calls the passkey test: with the loaded model, its
tokenizer and the settings, never the other way round.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from posx.pretrained.ruler.generate import Generate, greedy, sharded
from posx.pretrained.ruler.prompts import Prepared, Prompter, prepare
from posx.pretrained.ruler.suite import RulerSettings, evaluate_ruler
from posx.pretrained.scaling import Variant
from posx.runtime.distributed import World
from posx.runtime.outcomes import together

GENERATIONS = "ruler_generations.csv"
GENERATION_KEYS = ["task", "eval_length", "overrides"]
CACHE = ".cache/ruler"


def ruler_settings(values: dict[str, Any]) -> RulerSettings:
    """The ``ruler.*`` settings (checked by :func:`posx.pretrained.request.check_values`)."""
    return RulerSettings(
        tasks=list(values["ruler.tasks"]),
        samples=int(values["ruler.samples"]),
        template=str(values["ruler.template"]),
        threshold=float(values["ruler.threshold"]),
    )


def prepare_ruler(
    tokenizer: Any,
    name: str,
    tokenizer_sha: str,
    values: dict[str, Any],
    lengths: list[int],
    root: Path,
    essay: str,
) -> tuple[Prompter, Prepared]:
    """Every task's samples at every length, from the cache under ``root`` or built (nothing
    written yet).

    Args:
        tokenizer: The model's tokenizer.
        name: The model, for messages.
        tokenizer_sha: SHA-256 of the tokenizer's definition (the cache key's part).
        values: The ``key=value`` settings (``ruler.*``, ``eval.seed``).
        lengths: Lengths in the model's tokens.
        root: The results root (the cache is ``root/.cache/ruler``).
        essay: The corpus text the essay haystacks are cut from.

    Returns:
        The prompter and the samples.

    Raises:
        ConfigError: A length too short for a task, a tokenizer that cannot encode a prompt,
            or a chat template asked of a tokenizer without one.
    """
    settings = ruler_settings(values)
    prompter = Prompter(tokenizer, settings.template, name)
    identity = {
        "tokenizer": tokenizer_sha,
        "template": settings.template,
        "corpus": hashlib.sha256(essay.encode()).hexdigest()[:16],
    }
    prepared = prepare(
        prompter, settings.tasks, lengths, settings.samples, int(values["eval.seed"]), essay,
        identity, root / CACHE,
    )  # fmt: skip
    return prompter, prepared


def run_ruler(
    model: torch.nn.Module,
    ready: tuple[Prompter, Prepared],
    values: dict[str, Any],
    variants: list[Variant],
    trained: int,
    device: torch.device,
    batch_tokens: int,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    generate: Generate | None = None,
    w: World | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Writes the sample cache (the first process), then generates and scores every task,
    length and variant, the prompts shared among ``size`` processes under ``torchrun``.

    Args:
        model: The loaded causal LM.
        ready: :func:`prepare_ruler`'s prompter and samples.
        values: The ``key=value`` settings.
        variants: Eval-time scalings.
        trained: The model's trained context.
        device: Where it runs.
        batch_tokens: Tokens per generation batch (``eval.batch_tokens``).
        on_row: Called with each finished row.
        generate: Stands in for the model's greedy generation (tests).
        w: The processes that share the prompts under ``torchrun`` (None: one).

    Returns:
        The ``eval.csv`` rows and the generation rows.
    """
    prompter, prepared = ready
    w = w or World()
    with together(w):  # the first gather is next: rank 0's failed write must not hang it
        if w.is_main:
            prepared.write_cache()
    gen = sharded(generate or greedy(model, prompter.tokenizer, device, batch_tokens), w)
    return evaluate_ruler(
        model, prompter, prepared, ruler_settings(values), variants, trained, device, gen, on_row
    )
