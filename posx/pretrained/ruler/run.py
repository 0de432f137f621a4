"""``--suite ruler`` inside ``posx eval hf:...``: the samples are prepared (and every bad input
refused) before anything is written, then generated and scored per variant and length."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from posx.pretrained.ruler.generate import Generate, greedy
from posx.pretrained.ruler.prompts import Prepared, Prompter, prepare
from posx.pretrained.ruler.suite import RulerSettings, evaluate_ruler

if TYPE_CHECKING:
    from posx.pretrained.request import Request
    from posx.pretrained.run import Loaded

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


def prepare_ruler(request: Request, loaded: Loaded, essay: str) -> tuple[Prompter, Prepared]:
    """Every task's samples at every length, from the cache or built (nothing written yet).

    Raises:
        ConfigError: A length too short for a task, a tokenizer that cannot encode a prompt,
            or a chat template asked of a tokenizer without one.
    """
    settings = ruler_settings(request.values)
    prompter = Prompter(loaded.tokenizer, settings.template, loaded.source.name)
    identity = {
        "tokenizer": loaded.info["tokenizer"]["sha256"],
        "template": settings.template,
        "corpus": _digest(essay),
    }
    prepared = prepare(
        prompter, settings.tasks, request.settings.lengths, settings.samples,
        int(request.values["eval.seed"]), essay, identity, request.root / CACHE,
    )  # fmt: skip
    return prompter, prepared


def run_ruler(
    request: Request,
    loaded: Loaded,
    ready: tuple[Prompter, Prepared],
    on_row: Callable[[dict[str, Any]], None] | None = None,
    generate: Generate | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Writes the sample cache, then generates and scores every task, length and variant.

    Returns:
        The ``eval.csv`` rows and the generation rows.
    """
    prompter, prepared = ready
    prepared.write_cache()
    settings = ruler_settings(request.values)
    gen = generate or greedy(
        loaded.model, loaded.tokenizer, loaded.device, request.settings.batch_tokens
    )
    return evaluate_ruler(
        loaded.model, prompter, prepared, settings, request.settings.variants, loaded.trained,
        loaded.device, gen, on_row,
    )  # fmt: skip


def _digest(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:16]
