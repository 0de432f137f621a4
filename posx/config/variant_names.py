"""Short labels for eval-time variants: ``rope+yarn×4`` instead of
``rope [encoding.scaling.factor=4.0 encoding.scaling.type=yarn]``.

A variant is a run's encoding plus the eval-time overrides an ``eval.csv`` row records (sorted,
space-separated ``key=value`` tokens). Its short label is built by two generic rules, with no
knowledge of any particular encoding:

- a node that sets ``type`` (``encoding.scaling.type=yarn``) is named by that type, followed by
  ``×factor`` when the same node sets ``factor``; its other keys follow as ``key=value``;
- every other key loses the ``encoding.`` prefix (``encoding.base=40000`` -> ``base=40000``);
  keys outside the encoding keep their full name (``eval.seed=7``).

Parts are joined with ``+``: ``rope+yarn×4``, ``rope+ntk×8``, ``rope+base=40000``,
``alibi+eval.seed=7``. ``×`` may be typed as ``x`` wherever a label is accepted (``yarnx4``).
"""

from __future__ import annotations

import re

ENCODING_PREFIX = "encoding."
TIMES = "×"


def _number(text: str) -> str:
    """``4.0`` -> ``4``; other values as written."""
    try:
        value = float(text)
    except ValueError:
        return text
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else text


def parse_overrides(overrides: str) -> dict[str, str]:
    """``"a.b=1 c=x"`` -> ``{"a.b": "1", "c": "x"}`` (tokens without ``=`` keep an empty value)."""
    pairs = (token.partition("=") for token in overrides.split())
    return {key.lstrip("+~"): value for key, _, value in pairs}


def short_label(encoding: str, overrides: str) -> str:
    """The variant's short label (see the module docstring); ``encoding`` when no overrides.

    Args:
        encoding: The run's encoding label (``rope``, ``rope+randomized``).
        overrides: The ``overrides`` column of an eval row.
    """
    pairs = parse_overrides(overrides)
    if not pairs:
        return encoding
    typed = sorted(k.removesuffix(".type") for k, v in pairs.items() if k.endswith(".type"))
    parts: list[str] = []
    used: set[str] = set()
    for node in typed:
        kind = pairs[f"{node}.type"]
        used.add(f"{node}.type")
        part = kind
        if f"{node}.factor" in pairs:
            part += f"{TIMES}{_number(pairs[f'{node}.factor'])}"
            used.add(f"{node}.factor")
        parts.append(part)
        for key in sorted(k for k in pairs if k.startswith(f"{node}.") and k not in used):
            parts.append(f"{key.removeprefix(node + '.')}={_number(pairs[key])}")
            used.add(key)
    for key in sorted(k for k in pairs if k not in used):
        parts.append(f"{key.removeprefix(ENCODING_PREFIX)}={_number(pairs[key])}")
    return "+".join([encoding, *parts])


def long_label(encoding: str, overrides: str) -> str:
    """``rope [encoding.scaling.factor=4.0 encoding.scaling.type=yarn]``: every override as
    recorded, for variants whose short labels would coincide."""
    return f"{encoding} [{overrides}]" if overrides else encoding


def canonical(text: str) -> str:
    """A label as posx writes it, from one as typed: ``x`` before a number means ``×``
    (``yarnx4`` is ``yarn×4``, as run directories spell it), but ``max_len=4`` stays."""
    return re.sub(r"(?<=[A-Za-z_])x(?=\d)", TIMES, text.strip())


def matches(wanted: str, encoding: str, overrides: str, label: str) -> bool:
    """Whether ``--variant wanted`` selects the variant (``label`` = its shown label).

    Accepted forms: ``all``; ``base`` (no overrides); the label itself (``rope+yarn×4``, ``×``
    or ``x``); parts of it (``yarn``, ``yarn×4``, ``rope+yarn``: every part must be one of the
    label's parts, a type part also matching with any factor); or ``key=value`` tokens that
    the recorded overrides all contain (``encoding.scaling.type=yarn``).
    """
    wanted = canonical(wanted)
    if wanted == "all":
        return True
    if wanted in ("base", "none"):
        return overrides == ""
    if wanted in (canonical(label), canonical(short_label(encoding, overrides))):
        return True
    tokens = wanted.split()
    if all("=" in t for t in tokens) and set(tokens) <= set(overrides.split()):
        return True
    if not overrides:
        return False
    have = short_label(encoding, overrides).split("+")[len(encoding.split("+")) :]
    asked = wanted.split("+")
    if asked[: len(encoding.split("+"))] == encoding.split("+"):
        asked = asked[len(encoding.split("+")) :]
    return bool(asked) and all(
        any(part == a or part.startswith(f"{a}{TIMES}") for part in have) for a in asked
    )


def scaling_cell(cfg: object) -> str:
    """The eval-time scaling a run's config makes its encoding use, as the ``scaling`` cell of
    an eval row: the encoding node's ``scaling`` with its defaults filled in, as compact JSON
    (``{"factor": 4.0, "original_length": 64, "type": "yarn", ...}``); ``""`` for an encoding
    without one. It says what ran whether the scaling came from an eval-time override or from
    the run's own config (a ``posx extend`` run fine-tuned with YaRN is evaluated with it).

    Args:
        cfg: The composed config the evaluation built its model from.

    Returns:
        The JSON cell, or ``""``.
    """
    import dataclasses
    import json

    from omegaconf import OmegaConf

    from posx.config.build import model_dims
    from posx.encodings.rope_scaling import RopeScaling

    node = OmegaConf.select(cfg, "encoding.scaling")
    if node is None:
        return ""
    plain = OmegaConf.to_container(node, resolve=True)
    if not isinstance(plain, dict):
        return ""
    try:  # the encoding's own rule fills original_length (the first training length)
        made = RopeScaling.from_config(plain, model_dims(cfg)["train_length"])
    except (TypeError, ValueError):
        return json.dumps(plain, sort_keys=True, default=str)
    fields = {k: v for k, v in dataclasses.asdict(made).items() if v is not None}
    return json.dumps(fields, sort_keys=True)
