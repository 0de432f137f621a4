"""Override mistakes in posx's words, each with the fix: a word that is not ``key=value``
(``alibi``, ``encoding:alibi``), an option ``posx train`` does not have (``--encoding alibi``),
Hydra's syntax errors, and eval-time overrides that cannot apply (a sweep, another encoding);
and ``eval.lengths=[...]`` at eval time, which means ``--lengths``."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException

from posx.config.paths import GROUPS, choices
from posx.config.schema import TYPED_NODES
from posx.config.validate import positive_lengths
from posx.errors import ConfigError, one_line

# `encoding:alibi`: a setting written with a colon (not a Windows drive letter, not a URL)
COLON_SETTING = re.compile(r"^([A-Za-z_][\w.]*):([^/\\:]+)$")
EXAMPLE = "e.g. encoding=alibi or train.steps=500 (`posx list` shows the options)"


def setting_named(name: str) -> str:
    """The config key a bare name stands for: ``steps`` -> ``train.steps`` (a typed setting of
    that name), a group or a dotted key as it is."""
    if name in GROUPS or "." in name:
        return name
    for path, schema in TYPED_NODES:
        if name in {f.name for f in dataclasses.fields(schema)}:
            return f"{path}.{name}" if path else name
    return name


def unknown_flag(command: str, flag: str, value: str | None) -> str:
    """``posx train --encoding alibi``: the option does not exist; the setting is
    ``encoding=alibi``."""
    name, _, inline = flag.lstrip("-").partition("=")
    value = inline or value
    fix = f": {setting_named(name)}={value}" if value else f", {EXAMPLE}"
    return f"posx {command} has no option {flag.split('=', 1)[0]}; settings are key=value{fix}"


def not_key_value(word: str, dirs: Sequence[Path] | None = None) -> str:
    """A word that is no override: ``encoding:alibi``, or an option name alone (``alibi``)."""
    head = f"{word!r} is not an override: settings are key=value"
    found = COLON_SETTING.match(word)
    if found:
        return f"{head}: {found[1]}={found[2]}"
    groups = [g for g in GROUPS if word in choices(g, dirs)]
    if groups:
        return f"{head}: " + " or ".join(f"{g}={word}" for g in groups)
    return f"{head}, {EXAMPLE}"


def bad_override(text: str, reason: str, dirs: Sequence[Path] | None = None) -> str:
    """One override Hydra cannot parse, in words, with how values are written."""
    if "=" not in text:
        return not_key_value(text, dirs)
    return (
        f"bad override {text!r}: {reason}; a list is written [a,b], and a value with spaces "
        "or special characters in quotes: key='a b'"
    )


def parse_overrides(overrides: Sequence[str], dirs: Sequence[Path] | None = None) -> list[Override]:
    """Hydra's parse of ``overrides``.

    Raises:
        ConfigError: The first override Hydra cannot parse, in one line (:func:`bad_override`).
    """
    parser = OverridesParser.create()
    parsed = []
    for text in overrides:
        try:
            parsed.append(parser.parse_override(text))
        except HydraException as err:
            raise ConfigError(bad_override(text, one_line(err), dirs)) from err
    return parsed


def list_sweep(o: Override) -> str:
    """``eval.lengths=32,64`` where a list is meant: ``eval.lengths=[32,64]``."""
    key, _, values = o.input_line.partition("=")
    return (
        f"{key} takes a list: write {key}=[{values}] (without brackets, {values} is a sweep "
        "over single values, one run each)"
    )


def _check_eval_override(o: Override) -> None:
    """One eval-time override that cannot apply: a sweep, or another option of a group."""
    key, _, values = o.input_line.partition("=")
    if o.is_sweep_override():
        also = f", or --lengths {values}" if key == "eval.lengths" else ""
        raise ConfigError(
            f"{o.input_line} is a sweep (a comma outside brackets), but posx eval applies one "
            f"value per setting: a list is written in brackets, {key}=[{values}]{also}"
        )
    group = o.key_or_group
    if group in GROUPS and isinstance(o.value(), str):
        raise ConfigError(
            f"posx eval cannot change a run's {group} ({o.input_line}): a run is evaluated with "
            f"the {group} it was trained with; change one of its settings as {group}.KEY=VALUE, "
            f"or train another with `posx train {group}={values}`"
        )


def eval_lengths_override(
    overrides: Sequence[str], asked: list[int] | None
) -> tuple[list[int] | None, list[str]]:
    """Checks eval-time overrides (:func:`parse_overrides`, no sweeps, no other encoding) and
    takes ``eval.lengths=[...]`` out of them as the lengths to evaluate: the same as
    ``--lengths``, not a setting recorded in each row.

    Args:
        overrides: The ``key=value`` words of ``posx eval``.
        asked: The ``--lengths`` given, or None.

    Returns:
        The lengths to evaluate (None: each run's own) and the other overrides.

    Raises:
        ConfigError: An override that cannot apply, or ``--lengths`` and ``eval.lengths``
            that disagree.
    """
    rest = []
    for o in parse_overrides(overrides):
        _check_eval_override(o)
        if o.key_or_group != "eval.lengths":
            rest.append(o.input_line)
            continue
        value = o.value()
        if value is not None and not isinstance(value, list):
            raise ConfigError(f"eval.lengths takes a list: write eval.lengths=[{value}]")
        given = None if value is None else positive_lengths(value, "eval.lengths")
        if asked is not None and given is not None and given != asked:
            raise ConfigError(
                f"--lengths and {o.input_line} disagree; give the lengths once (--lengths)"
            )
        asked = asked if given is None else given
    return asked, rest


def one_config_overrides(
    command: str, args: Sequence[str], dirs: Sequence[Path] | None = None
) -> list[str]:
    """The overrides of a command that composes one config (``posx show-config``), checked:
    no options, no word that is not ``key=value``, no sweep.

    Raises:
        ConfigError: The first such word, with what to write instead.
    """
    for i, arg in enumerate(args):
        if arg.startswith("-"):
            after = args[i + 1] if i + 1 < len(args) else ""
            value = after if after and "=" not in after and not after.startswith("-") else None
            raise ConfigError(unknown_flag(command, arg, value))
    for o in parse_overrides(args, dirs):
        if o.is_sweep_override():
            key, _, values = o.input_line.partition("=")
            raise ConfigError(
                f"posx {command} shows one config, and {o.input_line} is a sweep (a comma "
                f"outside brackets): a list is written in brackets, {key}=[{values}]"
            )
    return list(args)


def protocol_overrides(
    mode: str | None,
    window: int | None,
    stride: int | None,
    buckets: str | None,
) -> list[str]:
    """The ``eval.*`` overrides that ``--mode``, ``--window``, ``--stride``, ``--buckets`` stand
    for (only those given)."""
    if mode is not None and mode not in ("full", "sliding"):
        raise ConfigError(f"--mode must be full or sliding, got {mode!r}")
    if mode == "full" and (window is not None or stride is not None):
        raise ConfigError("--window and --stride apply to --mode sliding only")
    protocol = {"eval.mode": mode, "eval.window": window, "eval.stride": stride}
    protocol["eval.buckets"] = buckets
    return [f"{k}={v}" for k, v in protocol.items() if v is not None]
