"""Eval-time variants a config asks for (``eval.variants``), evaluated right after training.

Each variant is a list of ``key=value`` overrides of the run's config (a RoPE scaling, a new
base), the same overrides ``posx eval RUN KEY=VALUE ...`` takes: its rows carry them in their
``overrides`` column, so reports show ``rope+yarn×4`` beside ``rope``. A preset that compares
eval-time variants (configs/experiment/rope_scaling.yaml) thus trains once and evaluates all.
"""

from __future__ import annotations

from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from posx.config.build import build_model
from posx.config.saved import apply_overrides
from posx.config.validate import validate
from posx.errors import ConfigError
from posx.evaluation.sweep import evaluate_run
from posx.model.transformer import TransformerLM
from posx.saved import SavedRun
from posx.tasks.base import Task


def variant_overrides(cfg: DictConfig) -> list[list[str]]:
    """``eval.variants`` as lists of strings (empty when the config has none)."""
    return [[str(o) for o in v] for v in cfg.eval.get("variants") or []]


def variant_config(cfg: DictConfig, overrides: list[str], vocab_size: int) -> DictConfig:
    """The run's config with one variant's overrides, checked by building its model on the
    ``meta`` device (a bad scaling type fails here, before any training).

    Raises:
        ConfigError: A bad override or a value the encoding refuses, naming the variant.
    """
    try:
        changed = apply_overrides(cfg, overrides)
        validate(changed)
        with torch.device("meta"):
            build_model(changed, vocab_size)
    except ConfigError as err:
        raise ConfigError(f"eval.variants {overrides}: {err}") from err
    return changed


def check_variants(cfg: DictConfig, vocab_size: int = 256) -> None:
    """Every variant of ``cfg`` can be built (called before training starts)."""
    for overrides in variant_overrides(cfg):
        variant_config(cfg, overrides, vocab_size)


def evaluate_variants(
    cfg: DictConfig, run: SavedRun, model: TransformerLM, task: Task, lengths: list[int]
) -> list[dict[str, Any]]:
    """Evaluates the trained ``model`` under each variant at ``lengths``; rows are merged into
    the run's ``eval.csv`` as ``posx eval`` would.

    Returns:
        Every variant's rows, in the order of ``eval.variants``.
    """
    rows: list[dict[str, Any]] = []
    device = next(model.parameters()).device
    for overrides in variant_overrides(cfg):
        changed = variant_config(cfg, overrides, task.vocab_size)
        variant = build_model(changed, task.vocab_size)
        variant.load_state_dict(model.state_dict())  # same weights, the variant's encoding
        variant.to(device)
        rows += evaluate_run(run, lengths, overrides, model=variant, task=task, cfg=changed)
    return rows


def scaling_refusal(run: SavedRun, variant: str) -> str:
    """Why ``posx eval RUN --variant VARIANT`` (a RoPE scaling, Self-Extend) cannot apply to
    ``run`` (``""`` when it can): its encoding has no ``encoding.scaling`` to set. Decided from
    the run's config, never from the encoding's name."""
    if OmegaConf.select(run.config, "encoding.scaling") is not None:
        return ""
    target = str(OmegaConf.select(run.config, "encoding._target_") or "?").rsplit(".", 1)[-1]
    return (
        f"--variant {variant}: {run.name}'s encoding ({target}) has no RoPE scaling "
        "(encoding.scaling); --variant applies to runs whose encoding has one (rope)"
    )
