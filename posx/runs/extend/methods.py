"""The methods of ``posx extend`` (``extension=NAME``, configs/extension/) and which of them fit
a parent.

A method declares what it needs by what its yaml sets: ``encoding.scaling.type`` needs an
encoding that has that setting (RoPE and every encoding that declares a ``scaling`` node of the
same shape); ``train.length`` or ``positions`` need nothing of the encoding. Whether a method
fits is decided from the parent's composed encoding node, never from the encoding's name, so a
user's own RoPE-like encoding with a ``scaling`` node takes PI, NTK, YaRN and Llama 3 as RoPE
does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from posx.config.keys import override_key
from posx.config.paths import options
from posx.errors import ConfigError

GROUP = "extension"  # the methods: configs/extension/NAME.yaml
TARGET = "encoding._target_"  # the one override that may replace the parent's encoding class
_ABSENT = object()


def method_keys(name: str, dirs: list[Path]) -> set[str]:
    """The keys an ``extension=NAME`` yaml sets (``train.length``, ``encoding.scaling.type``,
    ``positions`` for a ``defaults`` override of that group).

    Raises:
        ConfigError: No such option, or a yaml that is not a mapping.
    """
    found = options(GROUP, dirs).get(name)
    if found is None:
        raise ConfigError(
            f"unknown {GROUP}={name}; choose from {', '.join(sorted(options(GROUP, dirs)))}"
        )
    loaded = OmegaConf.to_container(OmegaConf.load(found), resolve=False)
    if not isinstance(loaded, dict):
        raise ConfigError(f"{found} is not a mapping of settings")
    keys: set[str] = set()
    for entry in loaded.pop("defaults", None) or []:
        if isinstance(entry, dict):  # `override /positions: pose`
            keys |= {str(k).split()[-1].strip("/") for k in entry}
    stack = [("", loaded)]
    while stack:
        prefix, node = stack.pop()
        for key, value in node.items():
            full = f"{prefix}{key}"
            if isinstance(value, dict) and value:
                stack.append((f"{full}.", value))
            else:
                keys.add(full)
    return keys


def chosen_methods(user: list[str]) -> list[str]:
    """The ``extension=`` values among the user's overrides (several for a sweep)."""
    parsed = OverridesParser.create().parse_overrides([o for o in user if override_key(o) == GROUP])
    if not parsed:
        return []
    if parsed[0].is_sweep_override():
        return list(parsed[0].sweep_string_iterator())
    return [parsed[0].get_value_element_as_str()]


def misfit(name: str, encoding: Any, dirs: list[Path]) -> str | None:
    """Why method ``name`` does not fit an encoding node, or None when it does: the first
    ``encoding.*`` key its yaml sets that the encoding does not declare.

    Args:
        name: The method (``yarn``).
        encoding: The parent's composed ``encoding`` node.
        dirs: The user's config dirs (their methods count too).
    """
    node = encoding if isinstance(encoding, DictConfig) else OmegaConf.create({})
    for key in sorted(k for k in method_keys(name, dirs) if k.startswith("encoding.")):
        path = key.removeprefix("encoding.")
        if path == "_target_":
            return f"it sets {TARGET}, which replaces the encoding"
        if OmegaConf.select(node, path, default=_ABSENT) is _ABSENT:
            setting = path.split(".")[0]
            target = node.get("_target_", "the encoding")
            return f"{target} has no setting {setting!r} (the method sets {key})"
    return None


def fitting_methods(encoding: Any, dirs: list[Path]) -> list[str]:
    """Every method (posx's and the user's) that fits an encoding node, sorted."""
    return sorted(n for n in options(GROUP, dirs) if misfit(n, encoding, dirs) is None)


def with_methods(user: list[str], methods: list[str]) -> list[str]:
    """The user's overrides with ``extension=`` set to ``methods`` (a sweep when several)."""
    rest = [o for o in user if override_key(o) != GROUP]
    return [*rest, f"{GROUP}={','.join(methods)}"] if methods else rest


def refused_pairs(
    user: list[str], encoding: Any, label: str, dirs: list[Path]
) -> tuple[list[str], dict[str, str]]:
    """The methods the user chose that fit a parent's encoding, and why each other one does
    not (``{"yarn": "posx.encodings.alibi.ALiBi has no setting 'scaling' ...; methods that
    fit alibi: control, plain, pose"}``). A user who names ``encoding._target_`` replaces the
    encoding on purpose: every method is then left to the new class's own checks."""
    chosen = chosen_methods(user)
    if any(override_key(o) == TARGET for o in user):
        return chosen, {}
    fit, refused = [], {}
    for name in chosen:
        why = misfit(name, encoding, dirs)
        if why is None:
            fit.append(name)
        else:
            others = ", ".join(fitting_methods(encoding, dirs)) or "none"
            refused[name] = f"{why}; methods that fit {label}: {others}"
    return fit, refused
