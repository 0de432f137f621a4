"""Eval-time RoPE scalings of a pretrained model, applied through its own configuration.

A variant is ``TYPE:FACTOR`` (``yarn:4``) or ``none`` (the model as it was saved). posx's scaling
names map onto the ``rope_parameters`` of the model's ``transformers`` config, so a number is
what a user of that model gets by setting the same scaling in its config:

- ``linear`` -> ``rope_type: linear`` (position interpolation);
- ``ntk`` -> ``rope_theta`` raised to ``theta * s^(d/(d-2))`` (NTK-aware, static), the type kept;
- ``dynamic_ntk`` -> ``rope_type: dynamic``;
- ``yarn`` -> ``rope_type: yarn``; ``llama3`` -> ``rope_type: llama3`` (low/high frequency
  factors 1 and 4, as posx's own);

both with ``original_max_position_embeddings`` = the model's trained context; and
``selfextend:G,W`` (Self-Extend, Jin et al. 2024: grouped positions beyond a neighbour window,
no scaling of the frequencies) switches the model's attention to posx's through ``transformers``'
attention interface (:mod:`posx.pretrained.self_extend`). Each variant's
rotary embedding modules are rebuilt from the new config (the attention weights are shared), and
every row records the variant as posx's own runs do (``encoding.scaling.type=yarn
encoding.scaling.factor=4``, shown as ``NAME+yarn×4``) and the ``rope_parameters`` it ran with.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from posx.errors import ConfigError

if TYPE_CHECKING:  # the names and configs here need no torch (a run's name is made before it)
    import torch

HF_TYPES = {"linear": "linear", "dynamic_ntk": "dynamic", "yarn": "yarn", "llama3": "llama3"}
POSX_TYPES = {hf: posx for posx, hf in HF_TYPES.items()}
VARIANT_TYPES = ("none", "linear", "ntk", "dynamic_ntk", "yarn", "llama3", "selfextend")


@dataclass(frozen=True)
class Variant:
    """One eval-time scaling: ``type`` (``none`` = as saved) and ``factor`` (Self-Extend's group
    size), with Self-Extend's neighbour ``window``."""

    type: str = "none"
    factor: float = 1.0
    window: int | None = None

    @property
    def overrides(self) -> str:
        """The ``overrides`` cell of its rows (sorted ``key=value`` tokens, as posx records), the
        overrides that give a posx RoPE run the same variant."""
        if self.type == "none":
            return ""
        out = f"encoding.scaling.factor={self.factor} encoding.scaling.type={self.type}"
        return out if self.window is None else f"{out} encoding.scaling.window={self.window}"

    @property
    def spec(self) -> str:
        """As ``--variant`` takes it (``selfextend:4,16``, ``yarn:4``, ``none``)."""
        if self.type == "none":
            return "none"
        if self.window is not None:
            return f"{self.type}:{self.factor:g},{self.window}"
        return f"{self.type}:{self.factor:g}"


def parse_variant(text: str) -> Variant:
    """``yarn:4`` (or ``yarn×4``, ``yarnx4``) -> :class:`Variant`; ``none`` -> the model as saved;
    ``selfextend:G,W`` -> Self-Extend with group size ``G`` and neighbour window ``W``.

    Raises:
        ConfigError: An unknown type, or a factor that is not a number >= 1.
    """
    spec = text.strip().replace("×", ":")
    if spec in ("none", "base"):
        return Variant()
    if spec.startswith("selfextend"):
        return _self_extend_variant(text, spec.removeprefix("selfextend"))
    kind, sep, factor = spec.partition(":")
    if not sep and "x" in spec:
        kind, _, factor = spec.rpartition("x")
    if kind not in VARIANT_TYPES or kind in ("none", "selfextend"):
        raise ConfigError(
            f"--variant {text!r}: use none, TYPE:FACTOR with TYPE one of "
            f"{', '.join(VARIANT_TYPES[1:-1])} (e.g. yarn:4), or selfextend:G,W"
        )
    try:
        value = float(factor)
    except ValueError:
        value = 0.0
    if not value >= 1.0:
        raise ConfigError(f"--variant {text!r}: the factor must be a number >= 1, e.g. {kind}:4")
    return Variant(kind, value)


def _self_extend_variant(text: str, rest: str) -> Variant:
    """``:G,W`` after ``selfextend``: whole numbers, ``G >= 1``, ``W >= 1``."""
    group, sep, window = rest.removeprefix(":").partition(",")
    try:
        g, w = int(group), int(window)
    except ValueError:
        g = w = 0
    if not rest.startswith(":") or not sep or g < 1 or w < 1:
        raise ConfigError(
            f"--variant {text!r}: Self-Extend takes selfextend:G,W, its group size G and "
            "neighbour window W as whole numbers >= 1 (e.g. selfextend:4,512)"
        )
    return Variant("selfextend", float(g), w)


def rope_parameters(config: Any) -> dict[str, Any] | None:
    """The config's single (not per-layer) ``rope_parameters`` dict, or None (no RoPE)."""
    params = getattr(config, "rope_parameters", None)
    if not isinstance(params, dict) or "rope_type" not in params:
        return None
    return params


def rotary_dim(config: Any) -> int:
    """Rotary width ``d``: the head dimension times the partial rotary factor."""
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    fraction = (rope_parameters(config) or {}).get("partial_rotary_factor") or 1.0
    return int(head * fraction)


def saved_scaling(config: Any) -> dict[str, Any] | None:
    """The RoPE scaling a config already carries (its ``rope_parameters`` when their type is
    not ``default``), else None."""
    params = rope_parameters(config)
    if params is None or params.get("rope_type") in (None, "default"):
        return None
    return params


def describe_scaling(params: dict[str, Any]) -> str:
    """``rope_type llama3, factor 8 over 32 tokens``: a saved scaling, in words."""
    over = params.get("original_max_position_embeddings")
    return f"rope_type {params['rope_type']}, factor {params.get('factor', 1):g}" + (
        f" over {over} tokens" if over else ""
    )


def composition_problem(config: Any, variant: Variant, what: str) -> str:
    """Why ``variant`` cannot go on top of the scaling ``config`` already carries (``""`` when it
    can): a scaling of the same type composes (the factors multiply, over the same original
    context), static NTK raises θ under any type, and another type would replace the saved one,
    so it is refused rather than silently dropping it. ``what`` names the asker in the reason
    (``extension=yarn``, ``--variant yarn:2``)."""
    saved = saved_scaling(config)
    if saved is None or variant.type in ("none", "ntk"):
        return ""
    if HF_TYPES[variant.type] == saved["rope_type"]:
        return ""
    same = POSX_TYPES.get(str(saved["rope_type"]))
    fix = f"{same} (the factors multiply) or ntk" if same else "ntk"
    return (
        f"{config.model_type} already carries a RoPE scaling ({describe_scaling(saved)}); {what} "
        f"would replace it, not compose with it: scale it with {fix}"
    )


def scaled_config(config: Any, variant: Variant, trained: int, what: str = "") -> Any:
    """A copy of ``config`` with ``variant``'s scaling in its ``rope_parameters``; on a config
    that already carries a scaling, composed with it (:func:`composition_problem`).

    Args:
        config: The model's config.
        variant: The scaling.
        trained: The context the scaling counts from when the config carries none.
        what: Who asks, for a refusal (default: ``--variant TYPE:FACTOR``).

    Raises:
        ConfigError: The model has no (single) RoPE to scale, or carries a scaling of another
            type.
    """
    params = rope_parameters(config)
    if params is None:
        raise ConfigError(f"{config.model_type} has no rotary positions to scale")
    asker = what or f"--variant {variant.type}:{variant.factor:g}"
    problem = composition_problem(config, variant, asker)
    if problem:
        raise ConfigError(problem)
    new = copy.deepcopy(config)
    base = dict(params)
    saved = saved_scaling(config)
    if saved is not None and variant.type != "ntk":  # the same type: the factors multiply
        new.rope_parameters = {**base, "factor": float(base.get("factor", 1)) * variant.factor}
        return new
    if variant.type == "ntk":
        from posx.encodings.rope_scaling import ntk_base

        # static NTK-aware: a larger base, the model's own rope type otherwise
        base["rope_theta"] = ntk_base(float(base["rope_theta"]), variant.factor, rotary_dim(config))
        new.rope_parameters = base
        return new
    keep = {k: base[k] for k in ("rope_theta", "partial_rotary_factor") if k in base}
    new_params: dict[str, Any] = {
        **keep,
        "rope_type": HF_TYPES[variant.type],
        "factor": variant.factor,
    }
    if variant.type in ("yarn", "llama3"):
        new_params["original_max_position_embeddings"] = trained
    if variant.type == "llama3":
        new_params.update(low_freq_factor=1.0, high_freq_factor=4.0)
    if variant.type == "dynamic_ntk":
        # transformers' dynamic scaling grows the base past max_position_embeddings: make that
        # the trained context (a saved scaling may have raised it)
        new.max_position_embeddings = trained
    new.rope_parameters = new_params
    return new


def rotary_modules(model: torch.nn.Module) -> list[tuple[torch.nn.Module, str, torch.nn.Module]]:
    """(parent, attribute, module) of each rotary embedding (a module with ``inv_freq`` and a
    ``rope_type``)."""
    found = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if hasattr(child, "inv_freq") and hasattr(child, "rope_type"):
                found.append((parent, name, child))
    return found


class Scaler:
    """Switches a loaded model between variants by rebuilding its rotary embeddings.

    Args:
        model: The loaded causal LM.
        trained: Its trained context length.
    """

    def __init__(self, model: torch.nn.Module, trained: int) -> None:
        self.model, self.trained = model, trained
        self.saved = rotary_modules(model)
        self.rope = rope_parameters(model.config) is not None and bool(self.saved)
        self.attention = model.config._attn_implementation

    def unsupported_reason(self, variant: Variant) -> str:
        """Why ``variant`` cannot apply to this model (``""`` when it can): no RoPE, or a saved
        scaling of another type it would replace (:func:`composition_problem`); Self-Extend
        keeps the saved scaling and asks for fixed frequencies and the attention interface."""
        if variant.type == "selfextend":
            from posx.pretrained import self_extend

            rope_type = (rope_parameters(self.model.config) or {}).get("rope_type")
            return self_extend.unsupported_reason(self.model, rope_type if self.rope else None)
        if variant.type == "none":
            return ""
        if not self.rope:
            return (
                f"{self.model.config.model_type} has no rotary positions to scale (its "
                "positions are not RoPE)"
            )
        what = f"--variant {variant.type}:{variant.factor:g}"
        return composition_problem(self.model.config, variant, what)

    def apply(self, variant: Variant) -> dict[str, Any] | None:
        """Puts ``variant``'s rotary embeddings into the model.

        Returns:
            The ``rope_parameters`` now in effect (None for a model without RoPE).
        """
        if not self.rope:
            return None
        from posx.pretrained import self_extend  # torch's, as the model's

        self_extend.disable(self.model, self.attention)
        if variant.type == "none":
            for parent, name, module in self.saved:
                setattr(parent, name, module)
            return rope_parameters(self.model.config)
        if variant.type == "selfextend":
            self.apply(Variant())
            window = int(variant.window or 0)
            inv_freq = self.saved[0][2].inv_freq
            self_extend.enable(self.model, int(variant.factor), window, inv_freq)
            params = dict(rope_parameters(self.model.config) or {})
            return params | {"self_extend_group": int(variant.factor), "self_extend_window": window}
        cfg = scaled_config(self.model.config, variant, self.trained)
        for parent, name, module in self.saved:
            setattr(parent, name, type(module)(config=cfg).to(module.inv_freq.device))
        return rope_parameters(cfg)


def describe(params: dict[str, Any] | None) -> str:
    """``rope_parameters`` as a compact JSON cell (``""`` without RoPE)."""
    if params is None:
        return ""
    return json.dumps({k: v for k, v in params.items() if v is not None}, sort_keys=True)
