"""``posx extend``'s shape rule: an extension keeps its parent's parameter shapes, except where
the module that owns a parameter defines how to resize it (``resize_parameter``: the learned
table) and the user chose how (``extend.resize``). Checked on the ``meta`` device, before any
run starts."""

from __future__ import annotations

from collections.abc import Callable

import torch
from omegaconf import DictConfig

from posx.config.build import build_model
from posx.errors import ConfigError
from posx.model.transformer import TransformerLM
from posx.saved import SavedRun


def _meta_model(cfg: DictConfig, vocab_size: int) -> TransformerLM:
    """The model ``cfg`` builds, on the ``meta`` device (shapes only, no memory)."""
    with torch.device("meta"):
        return build_model(cfg, vocab_size)


def _shapes(cfg: DictConfig, vocab_size: int) -> dict[str, list[int]]:
    return {k: list(v.shape) for k, v in _meta_model(cfg, vocab_size).state_dict().items()}


def resizable(model: torch.nn.Module, name: str) -> bool:
    """Whether a module of ``model`` owns parameter ``name`` and knows how to resize it."""
    parts = name.split(".")
    return any(
        hasattr(model.get_submodule(".".join(parts[:cut])), "resize_parameter")
        for cut in range(len(parts) - 1, 0, -1)
    )


def check_shapes(
    run: SavedRun, combos: list[list[str]], compose_with: Callable[[list[str]], DictConfig]
) -> None:
    """Refuses overrides that change a parameter's shape (the parent's weights would not fit),
    naming the override; a shape the owning module can resize is allowed with
    ``extend.resize=interpolate`` or ``copy``.

    Args:
        run: The parent run, opened (its checkpoint's shapes are the reference).
        combos: The user's overrides, one list per combination to check (sweeps expanded).
        compose_with: ``overrides -> the extension's config`` (the parent's config under them).

    Raises:
        ConfigError: One line naming the override, the parameter and both shapes.
    """
    have = run.shapes
    # the vocabulary (the task cannot change): rows of the token embedding or the output layer
    vocab = next((s[0] for n, s in have.items() if n in ("tok.weight", "head.weight")), 256)
    for combo in combos:
        cfg = compose_with(combo)
        model = _meta_model(cfg, vocab)
        for name, tensor in model.state_dict().items():
            shape = list(tensor.shape)
            if name not in have or have[name] == shape:
                continue
            can = resizable(model, name)
            if can and cfg.extend.resize != "none":
                continue
            culprit = next(
                (o for o in combo if _shapes(compose_with([o]), vocab).get(name) != have[name]),
                " ".join(combo),
            )
            fix = (
                "choose how with extend.resize=interpolate or extend.resize=copy"
                if can
                else "an extension keeps its parent's parameter shapes"
            )
            raise ConfigError(
                f"{culprit} changes the shape of {name} ({have[name]} in {run.name}, {shape} "
                f"with it): {fix}"
            )
