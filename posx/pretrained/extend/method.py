"""The fine-tuning methods of ``configs/extension/`` read for a pretrained model.

``posx extend hf:NAME extension=yarn`` takes the same method yamls as ``posx extend RUN``: this
module reads their fields (it never composes them into a posx model config) and turns them into
what a Hugging Face model takes:

- ``encoding.scaling.type`` -> the model config's ``rope_parameters`` in the ``transformers``
  convention (:func:`posx.pretrained.scaling.scaled_config`: ``rope_type``, ``factor``,
  ``original_max_position_embeddings``, YaRN's and Llama 3's parameters), with
  ``max_position_embeddings`` raised to the new length, so the saved model loads anywhere
  without posx;
- ``train.length: ${extend.length}`` -> fine-tune at the target length; no ``train.length`` ->
  at the model's trained context (PoSE, the control);
- ``positions: pose`` -> PoSE through ``position_ids`` (windows of the trained context, positions
  spread over the target length).

:func:`needs_rope_scaling` is the one capability this branch asks of a method (issue 46): a
method that changes RoPE cannot apply to a model whose positions are not RoPE.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from posx.config.paths import options
from posx.errors import ConfigError, one_line
from posx.pretrained.scaling import HF_TYPES, Variant, rope_parameters, scaled_config

GROUP = "extension"
TARGET = "${extend.length}"
FACTOR = "${extend.factor}"
# posx's own extensions count the scaling from the first base (a chain); a pretrained model is
# its own first base, so the two are one factor here
FACTORS = (FACTOR, "${extend.base_factor}")
# the posx scaling types a transformers config can hold (static NTK raises rope_theta)
SCALINGS = (*HF_TYPES, "ntk")
# keys of a method yaml this branch reads; the others set posx's own training (train.steps ...)
# from extend.*, which `posx extend hf:` reads directly
READ = {"train", "eval", "encoding", "positions", "defaults"}


@dataclass(frozen=True)
class Method:
    """One fine-tuning method, as a pretrained model's extension applies it.

    Attributes:
        name: The yaml's name (``yarn``).
        scaling: The posx scaling type it sets (``yarn``, ``linear``, ``ntk``, ``llama3``),
            or None (plain fine-tuning, PoSE, the control).
        at_target: Fine-tune at the target length (else at the trained context).
        pose_chunks: PoSE's chunks when the method spreads positions over the target, else 0.
    """

    name: str
    scaling: str | None
    at_target: bool
    pose_chunks: int = 0


def needs_rope_scaling(method: Method) -> bool:
    """Whether ``method`` changes the model's RoPE (and so needs a model whose positions are
    RoPE): the capability this branch asks of a method."""
    return method.scaling is not None or method.pose_chunks > 0


def read_method(name: str, dirs: Sequence[Path] = ()) -> Method:
    """The method ``configs/extension/NAME.yaml`` (or a user dir's) describes.

    Raises:
        ConfigError: No such method (the known ones listed), a damaged yaml, or one that sets
            something a pretrained model cannot take.
    """
    found = options(GROUP, dirs)
    if name not in found:
        raise ConfigError(f"extension={name} is not a method; choose from {', '.join(found)}")
    path = found[name]
    try:
        node = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"{path} is damaged ({one_line(err)})") from err
    if not isinstance(node, dict):
        raise ConfigError(f"{path} is damaged (a mapping was expected)")
    other = sorted(set(node) - READ)
    if other:
        raise ConfigError(
            f"extension={name} sets {other[0]}, which a pretrained model does not take "
            "(posx extend hf: reads train.length, encoding.scaling and positions)"
        )
    return Method(name, _scaling(name, node), _at_target(name, node), _pose(name, node))


def _scaling(name: str, node: dict[str, Any]) -> str | None:
    encoding = node.get("encoding") or {}
    if set(encoding) - {"scaling"}:
        raise ConfigError(
            f"extension={name} changes encoding.{sorted(set(encoding) - {'scaling'})[0]}; a "
            "pretrained model's positions change only through encoding.scaling"
        )
    scaling = encoding.get("scaling") or {}
    kind = scaling.get("type")
    if kind in (None, "none"):
        return None
    if kind not in SCALINGS:
        raise ConfigError(
            f"extension={name} sets encoding.scaling.type={kind}, which transformers configs do "
            f"not hold; they take {', '.join(SCALINGS)}"
        )
    if scaling.get("factor", FACTOR) not in FACTORS:
        raise ConfigError(
            f"extension={name}: encoding.scaling.factor must be {' or '.join(FACTORS)}"
        )
    return str(kind)


def _at_target(name: str, node: dict[str, Any]) -> bool:
    length = (node.get("train") or {}).get("length")
    if length not in (None, TARGET):
        raise ConfigError(f"extension={name}: train.length must be {TARGET} or absent")
    return length == TARGET


def _pose(name: str, node: dict[str, Any]) -> int:
    chosen = None
    for entry in node.get("defaults") or []:
        if isinstance(entry, dict):
            chosen = entry.get("override /positions", chosen)
    positions = node.get("positions") or {}
    if chosen in (None, "default") and not positions:
        return 0
    if chosen != "pose" or positions.get("target_length", TARGET) != TARGET:
        raise ConfigError(
            f"extension={name} sets positions={chosen}; pretrained models take pose (with "
            f"target_length {TARGET}) or none"
        )
    return int(positions.get("chunks", 2))


def extended_config(config: Any, method: Method, factor: float, trained: int, length: int) -> Any:
    """A copy of the model's config with the method's scaling: ``rope_parameters`` as
    :func:`posx.pretrained.scaling.scaled_config` sets them, ``max_position_embeddings`` the new
    length when the method fine-tunes at it (not PoSE's nor the control's).

    Raises:
        ConfigError: The method changes RoPE and the model has no (single) RoPE, or it trains
            a model with learned positions past its table.
    """
    if needs_rope_scaling(method) and rope_parameters(config) is None:
        raise ConfigError(
            f"extension={method.name} changes RoPE, but {config.model_type} has no rotary "
            "positions (its positions are not RoPE); use extension=plain or extension=control"
        )
    if rope_parameters(config) is None:
        # learned positions: max_position_embeddings is the table's size, not a setting
        if method.at_target and length > trained:
            raise ConfigError(
                f"{config.model_type} has learned positions for {trained} tokens only; it "
                f"cannot be fine-tuned at {length} (extension=control trains at {trained})"
            )
        return copy.deepcopy(config)
    if method.scaling is None:
        new = copy.deepcopy(config)
    else:
        # a base's own scaling is composed with (same type: factors multiply) or the method
        # refused in one line naming it, never dropped
        new = scaled_config(config, Variant(method.scaling, factor), trained,
                            f"extension={method.name}")  # fmt: skip
    if method.at_target and method.scaling != "dynamic_ntk":
        # only a method that trained at the new length saves it as the model's context: PoSE
        # and the control trained at the old one (a reader takes this as the trained context)
        new.max_position_embeddings = max(length, int(new.max_position_embeddings or 0))
    return new


def check_family(model: Any, config: Any, method: Method) -> None:
    """Refuses a family whose rotary embedding ignores the scaling its config now asks for
    (built on the meta device: no memory).

    Raises:
        ConfigError: The rotary modules do not run the ``rope_type`` the config holds.
    """
    params = rope_parameters(config)
    if method.scaling is None or params is None:
        return
    want = params["rope_type"]
    found = {
        getattr(m, "rope_type", None) for m in model.modules() if hasattr(m, "inv_freq")
    }  # fmt: skip
    if found != {want}:
        raise ConfigError(
            f"{config.model_type} does not support rope_type {want} (its rotary embedding "
            f"runs {', '.join(sorted(map(str, found))) or 'none'}); choose another extension="
        )
