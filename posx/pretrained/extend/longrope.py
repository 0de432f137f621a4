"""LongRoPE (Ding et al. 2024) for ``posx extend hf:NAME extension=longrope``: the per-dimension
factors searched on the held-in text, written as ``transformers``' ``rope_type: longrope``.

The model's config gets ``rope_parameters``: ``rope_type: longrope``, ``long_factor`` = the
searched ``lambda [d/2]`` (inverse frequencies ``theta_j / lambda_j`` past the trained context),
``short_factor`` = ones (the model as trained up to it), ``original_max_position_embeddings`` =
the trained context, ``factor`` = target / trained and ``attention_factor`` =
``sqrt(1 + ln s / ln L)`` (``transformers``' own default, written out), with
``max_position_embeddings`` the target. Any ``transformers`` then rebuilds the frequencies the
search scored, without posx.

The fitness of a candidate is the perplexity of the model under it on the **search split**: the
last ``longrope.windows`` windows of the target length of the held-in text (never the held-out
text that the evaluation scores). The search (:mod:`posx.evaluation.longrope_search`) starts
from PI's, NTK's and YaRN's factors, shows a line per iteration, and keeps its state in the run
directory, so ``posx resume`` of an interrupted extension continues the search. Under
``torchrun`` rank 0 searches and hands the factors to the others.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from posx.encodings.rope_scaling import longrope_attention_scale
from posx.errors import ConfigError
from posx.evaluation.longrope_search import Search, SearchSettings, start_factors
from posx.pretrained import load
from posx.pretrained.scaling import (
    describe_scaling,
    rope_parameters,
    rotary_dim,
    rotary_modules,
    saved_scaling,
)
from posx.runtime.distributed import World
from posx.runtime.outcomes import from_main

STATE_FILE = "longrope_search.json"
# longrope.* settings of posx extend hf: and the search's field each sets
SETTINGS = {"longrope.population": "population", "longrope.parents": "parents",
            "longrope.mutations": "mutations", "longrope.crossovers": "crossovers",
            "longrope.iterations": "iterations", "longrope.step": "step",
            "longrope.seed": "seed"}  # fmt: skip
DEFAULTS: dict[str, Any] = {
    key: getattr(SearchSettings(), field) for key, field in SETTINGS.items()
}
DEFAULTS["longrope.windows"] = 2  # windows of the target length in the search split


def longrope_parameters(
    params: dict[str, Any], factors: Sequence[float], trained: int, length: int
) -> dict[str, Any]:
    """``rope_parameters`` of ``rope_type: longrope`` with ``factors`` as the long factors.

    Args:
        params: The model's own ``rope_parameters`` (its ``rope_theta`` and partial rotary
            factor are kept).
        factors: ``lambda [d/2]``.
        trained: The trained context.
        length: The target length.
    """
    keep = {k: params[k] for k in ("rope_theta", "partial_rotary_factor") if k in params}
    scale = length / trained
    return {
        **keep,
        "rope_type": "longrope",
        "long_factor": [float(f) for f in factors],
        "short_factor": [1.0] * len(factors),
        "original_max_position_embeddings": int(trained),
        "factor": float(scale),
        "attention_factor": longrope_attention_scale(scale, int(trained)),
    }


def longrope_config(config: Any, factors: Sequence[float] | None, trained: int, length: int) -> Any:
    """A copy of ``config`` with LongRoPE's ``rope_parameters`` (``factors`` None: YaRN's start
    factors, until the search replaces them) and ``max_position_embeddings`` the target."""
    params = rope_parameters(config)
    if params is None:
        raise ConfigError(f"{config.model_type} has no rotary positions for LongRoPE")
    saved = saved_scaling(config)
    if saved is not None:  # LongRoPE's factors count from plain RoPE: never drop a scaling
        raise ConfigError(
            f"{config.model_type} already carries a RoPE scaling ({describe_scaling(saved)}); "
            "extension=longrope would replace it, not compose with it: extend it with the "
            "scaling's own type, or LongRoPE a model without one"
        )
    if factors is None:
        factors = starts_of(config, trained, length)["yarn"]
    new = copy.deepcopy(config)
    new.rope_parameters = longrope_parameters(params, factors, trained, length)
    new.max_position_embeddings = max(length, int(new.max_position_embeddings or 0))
    return new


def starts_of(config: Any, trained: int, length: int) -> dict[str, list[float]]:
    """PI's, NTK's and YaRN's factors for the model's RoPE at ``length / trained``."""
    params = rope_parameters(config) or {}
    theta = float(params.get("rope_theta", 10000.0))
    return start_factors(theta, rotary_dim(config), length / trained, trained)


def search_windows(ids: Tensor, length: int, count: int) -> Tensor:
    """The search split: the last ``count`` windows of ``length`` tokens of the held-in ids
    ``[t]`` (as many as it holds, at least one) -> ``[n, length]``.

    Raises:
        ConfigError: Not one window.
    """
    n = min(count, len(ids) // length)
    if n < 1:
        raise ConfigError(
            f"the held-in text has {len(ids)} tokens of this model, fewer than one window of "
            f"{length} for the LongRoPE search; use a larger task.corpus"
        )
    return ids[len(ids) - n * length :].view(n, length)


def perplexity_fitness(
    model: torch.nn.Module, windows: Tensor, params_of: Callable[[Sequence[float]], dict]
) -> Callable[[Sequence[float]], float]:
    """Candidate factors -> the model's perplexity on ``windows [n, L]`` under them (its rotary
    embeddings rebuilt from the candidate's ``rope_parameters``; the weights shared)."""
    saved = rotary_modules(model)
    device = next(model.parameters()).device

    def fitness(factors: Sequence[float]) -> float:
        config = copy.deepcopy(model.config)
        config.rope_parameters = params_of(factors)
        for parent, name, module in saved:
            setattr(parent, name, type(module)(config=config).to(device))
        total = 0.0
        with torch.inference_mode():
            for row in windows:
                ids = row[None].to(device)
                total += float(model(input_ids=ids, labels=ids, use_cache=False).loss)
        return math.exp(total / len(windows))

    return fitness


def search_settings(values: dict[str, Any]) -> SearchSettings:
    """The search's sizes from the ``longrope.*`` settings, checked."""
    fields = {field: values[key] for key, field in SETTINGS.items() if key in values}
    settings = SearchSettings(**fields)
    settings.check()
    return settings


def search_factors(
    plan: Any, ids: Tensor, run: Path, say: Callable[[str], None], world: World
) -> dict[str, Any]:
    """Searches LongRoPE's factors for ``plan`` (rank 0; the others receive them) and puts them
    into ``plan.config``.

    Args:
        plan: The extension's plan (its config, trained context, target, settings).
        ids: The held-in text's token ids ``[t]``.
        run: The run directory (the search's state file goes there).
        say: Progress lines.
        world: The processes.

    Returns:
        What ``run.json`` records of the search (its settings, each start's perplexity, the
        best's, the candidates evaluated).
    """
    v = plan.values

    def searched() -> str:  # rank 0's; its error is raised on every rank, not waited on
        settings = search_settings(v)
        windows = search_windows(ids, plan.length, int(v.get("longrope.windows") or 2))
        dtype = torch.bfloat16 if plan.bf16 else torch.float32
        model = load.load_model(plan.source, plan.config, dtype, plan.trust).to(plan.device)
        base = rope_parameters(load.load_config(plan.source, plan.trust)) or {}

        def params_of(factors: Sequence[float]) -> dict[str, Any]:
            return longrope_parameters(base, factors, plan.trained, plan.length)

        fitness = perplexity_fitness(model, windows, params_of)
        starts = starts_of(plan.config, plan.trained, plan.length)
        search = Search(
            fitness, starts, plan.length / plan.trained, settings, run / STATE_FILE, say
        )
        found = search.run()
        del model
        return json.dumps({
            "factors": found.factors, "perplexity": found.fitness, "starts": found.starts,
            "evaluated": found.evaluated, "search_windows": int(windows.shape[0]),
            "search_tokens": int(windows.numel()), "settings": dataclasses.asdict(settings),
        })  # fmt: skip

    record = json.loads(from_main(searched, world))
    base = rope_parameters(load.load_config(plan.source, plan.trust)) or {}
    plan.config.rope_parameters = longrope_parameters(
        base, record["factors"], plan.trained, plan.length
    )
    return record
