"""What a bad override or an unknown key should have been, in posx's words: the key's nearest
spelling, the settings a ``_target_`` class takes, the options of a group that have a key; used by
composition (:mod:`posx.config.compose`), validation and eval-time overrides."""

from __future__ import annotations

import difflib
import inspect
import re
import sys
from typing import Any

import yaml
from hydra import compose as hydra_compose
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posx.config.build import locate, model_dims
from posx.config.paths import (
    GROUPS,
    options,
    user_config_dirs,
)
from posx.errors import ConfigError

# OmegaConf's names of the types a typed setting converts to, as posx's messages say them
KINDS = {"Integer": "an integer", "Float": "a number", "bool": "true or false"}


def one_line(err: BaseException) -> str:
    """The first line of an error and of its root cause, joined (Hydra wraps the cause)."""
    parts: list[str] = []
    while err is not None:
        text = str(err).strip().splitlines()[0].rstrip(".") if str(err).strip() else ""
        if text and not any(text in p for p in parts):  # a cause the message already quotes
            parts.append(text)
        err = err.__cause__  # type: ignore[assignment]
    return ": ".join(parts[:1] + parts[-1:]) if len(parts) > 1 else (parts[0] if parts else "error")


class ListValueError(ConfigError):
    """A single value for a list setting (``eval.lengths=32``, or each value of the sweep
    ``eval.lengths=32,64``); ``key`` names the setting, so that a caller that has the user's
    own line can name the fix."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


def override_error(err: BaseException, overrides: list[str]) -> ConfigError:
    """Hydra's error for a config that cannot be composed, in posx's words: an unknown option,
    an unknown setting (what there is), a single value for a list; else its first line."""
    text, cause = str(err), err.__cause__
    while cause is not None:  # Hydra wraps OmegaConf's error, which names the type
        text, cause = f"{text}: {cause}", cause.__cause__
    merged = re.search(r"Error merging override ([^=\s]+)=(.*?)(?::\s|$)", text)
    if merged and "is not a ListConfig" in text:
        key, value = merged[1].lstrip("+~"), merged[2]
        return ListValueError(f"{key} takes a list: write {key}=[{value}]", key)
    typed = re.search(r"Value '(.*?)' of type '\w+' could not be converted to (\w+)", text)
    typed = typed or re.search(r"Value '(.*?)' is not a valid (bool)", text)
    if merged and typed and typed[2] in KINDS:  # `train.steps=abc`: OmegaConf's words, in ours
        key = merged[1].lstrip("+~")
        return ConfigError(f"{key} must be {KINDS[typed[2]]}, got {typed[1]!r}")
    unknown = re.search(r"Could not override '([^']+)'", text)
    hint = _known_keys(unknown[1], overrides) if unknown else ""
    if hint:
        return ConfigError(f"unknown setting '{unknown[1]}'{hint}")
    return ConfigError(_missing_option(err) or one_line(err))


def _missing_option(err: BaseException) -> str:
    """``unknown hydra/launcher 'nosuch'; choose from: basic, joblib, ...`` from Hydra's
    multi-line message for a config group option that does not exist; empty otherwise."""
    text = str(err).split("Config search path")[0]
    found = re.search(r"Could not find '(.+)/([^/']+)'", text)
    choices = re.findall(r"^\t(\S+)$", text, re.MULTILINE)
    if not found or not choices:
        return ""
    return f"unknown {found[1]} '{found[2]}'; choose from: {', '.join(choices)}"


def _known_keys(key: str, overrides: list[str]) -> str:
    """For an override of a key that does not exist: what the config has there (from the
    config composed without that override, see :func:`key_hint`); empty when it cannot say."""
    rest = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != key]
    try:
        return key_hint(hydra_compose(config_name="config", overrides=rest), key)
    except (HydraException, OmegaConfBaseException, ValueError):
        return ""


def _first_missing(cfg: DictConfig, key: str) -> tuple[str, str] | None:
    """The deepest node of ``key`` that exists and the name missing under it:
    ``encoding.scaling.type`` on ALiBi -> ``("encoding", "scaling")``; None when a part of the
    path is a value, not a node."""
    parts = key.lstrip("+~").split(".")
    node: Any = cfg
    for i, part in enumerate(parts):
        if not isinstance(node, DictConfig):
            return None
        if part not in node:
            return ".".join(parts[:i]), part
        node = node[part]
    return None


def key_hint(cfg: DictConfig, key: str) -> str:
    """``; did you mean 'model.d_model'? model keys: ...`` for a ``key`` missing from ``cfg``.

    Under a node that a ``_target_`` class builds it names the class and what it takes, and the
    other options of its group that have the setting: ``; encoding (posx.encodings.alibi.ALiBi)
    has no setting 'scaling'; encoding keys: (none; n_heads comes from the model); encoding
    options with 'scaling': rope``.
    """
    found = _first_missing(cfg, key)
    node = OmegaConf.select(cfg, found[0]) if found and found[0] else cfg
    if found is None or not isinstance(node, DictConfig):
        return ""
    parent, leaf = found
    keys, given = _settings(cfg, node)
    close = difflib.get_close_matches(leaf, keys, n=1)
    hint = f"; did you mean '{parent + '.' if parent else ''}{close[0]}'?" if close else ";"
    listed = ", ".join(keys) or ("none" if given else "(none)")
    if given:
        verb = "comes" if len(given) == 1 else "come"
        listed += f" ({', '.join(given)} {verb} from the model)"
    hint += f" {parent or 'top-level'} keys: {listed}"
    if "_target_" not in node:
        return hint
    return f"; {parent} ({node._target_}) has no setting '{leaf}'{hint}" + _options_with(
        parent, leaf
    )


def _settings(cfg: DictConfig, node: DictConfig) -> tuple[list[str], list[str]]:
    """A node's settings: its keys, then the other arguments its ``_target_`` class takes;
    and the arguments posx passes from the model (an encoding's ``n_heads``, ``head_dim``).

    The class is inspected only when importing it runs no code that was not already run:
    posx's own, or a module already imported (a run directory's target is never imported
    here: see :mod:`posx.config.trust`).
    """
    keys = [str(k) for k in node if not str(k).startswith("_")]
    target = str(node.get("_target_") or "")
    loaded = target.startswith("posx.") or target.rpartition(".")[0] in sys.modules
    if not loaded:
        return keys, []
    try:
        params = inspect.signature(locate(target)).parameters
        dims = set(model_dims(cfg))
    except Exception:  # noqa: BLE001 - nothing to inspect, or a config without a model
        return keys, []
    kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    named = [n for n, p in params.items() if n != "self" and p.kind not in kinds]
    keys += [n for n in named if n not in keys and n not in dims]
    return keys, [n for n in named if n in dims and n not in keys]


def _options_with(group: str, leaf: str) -> str:
    """``; encoding options with 'scaling': rope``: the group's options whose yaml sets
    ``leaf`` (empty when none does, or ``group`` is no config group)."""
    if group not in GROUPS:
        return ""
    having = []
    for name, path in options(group, user_config_dirs()).items():
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(data, dict) and leaf in data:
            having.append(name)
    return f"; {group} options with '{leaf}': {', '.join(having)}" if having else ""
