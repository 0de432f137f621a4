"""Which ``_target_`` entries of a run's config posx may build when it loads the run.

``posx train`` builds whatever the user's own command line names. A run directory, though, is
data that people share (a colleague's sweep, a paper's artifacts), and Hydra's ``instantiate``
calls whatever a ``_target_`` names: ``torch.load`` with ``weights_only: false`` unpickles,
``builtins.open`` with ``mode: w`` truncates a file. So loading a run (``posx eval``,
``posx resume``) builds only trusted targets:

- posx's own classes: encodings, tasks and position strategies (classes defined in
  ``posx.encodings``, ``posx.tasks`` and ``posx.positions``);
- what the user trusts when loading: ``--trust PREFIX`` (repeatable) and the ``POSX_TRUST``
  environment variable (comma-separated), where ``PREFIX`` is a module or package
  (``mypkg`` trusts ``mypkg.enc.MyEncoding``) or one exact target;
- every exact ``_target_`` named in a yaml of the user's own config dirs (``--config-dir``,
  ``POSX_CONFIG_PATH``): the user declared those classes by writing them there. The config
  dirs a run recorded are not the user's and grant nothing.

A run's own files never grant trust: ``run.json`` records which prefixes its training needed
(``needs_trust``), which only words the error message (a run trained before posx recorded it
is told so, not suspected of an edited config).

The refusal says how to trust a target in the caller's terms: ``--trust mypkg`` on the command
line (the default), ``trust=['mypkg']`` from :mod:`posx.api` (:func:`trust_wording`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from posx.config.build import locate
from posx.config.paths import user_config_targets
from posx.errors import ConfigError

ENV = "POSX_TRUST"
# posx's own buildable classes: a class defined in one of these packages.
BUILTIN = ("posx.encodings", "posx.tasks", "posx.positions")
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


class UntrustedTarget(ConfigError):
    """A run's config names code that is neither posx's nor trusted (exit code 2)."""


def cli_trust(allow: str) -> str:
    """How the command line trusts ``allow``: ``--trust mypkg``."""
    return f"--trust {allow}"


def api_trust(allow: str) -> str:
    """How :mod:`posx.api`'s functions trust ``allow``: ``trust=['mypkg']``."""
    return f"trust=[{allow!r}]"


# How an UntrustedTarget message says to trust a target. A context variable, not only an
# argument: the check runs deep inside posx.runs and posx.config.saved, and only the outermost
# caller (the CLI, or posx.api) knows how its user passes trust.
TRUST_WORDING: ContextVar[Callable[[str], str]] = ContextVar(
    "posx_trust_wording", default=cli_trust
)


@contextmanager
def trust_wording(how: Callable[[str], str]) -> Iterator[None]:
    """Within the block, refusals say how to trust a target with ``how`` (:func:`api_trust`)."""
    token = TRUST_WORDING.set(how)
    try:
        yield
    finally:
        TRUST_WORDING.reset(token)


def trusted_prefixes(
    given: Iterable[str] | None = None, dirs: Sequence[Path] | None = None
) -> tuple[str, ...]:
    """The prefixes the user trusts: ``--trust`` values, then ``POSX_TRUST`` (comma-separated),
    then the exact ``_target_``s of the yamls in the user's config dirs.

    Args:
        given: ``--trust`` values.
        dirs: The user's config dirs (default: from ``POSX_CONFIG_PATH``).

    Raises:
        ConfigError: A ``--trust``/``POSX_TRUST`` value that is not a dotted Python name.
    """
    values = [*(given or []), *os.environ.get(ENV, "").split(",")]
    prefixes = []
    for value in (v.strip() for v in values):
        if not value:
            continue
        if not _DOTTED.fullmatch(value):
            raise ConfigError(
                f"--trust / {ENV} takes module or class paths such as mypkg or "
                f"mypkg.encodings.MyEncoding, got {value!r}"
            )
        prefixes.append(value)
    # exact targets only (is_trusted matches `target == prefix` first); a malformed one in
    # a yaml is left to the config checks, not trusted
    prefixes += sorted(t for t in user_config_targets(dirs) if _DOTTED.fullmatch(t))
    return tuple(dict.fromkeys(prefixes))


def config_targets(node: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every ``(key path, _target_ value)`` in a config, nested ones included (Hydra builds
    a ``_target_`` anywhere inside the arguments of another)."""
    found: list[tuple[str, Any]] = []
    if isinstance(node, DictConfig):
        for key in node:
            where = f"{path}.{key}" if path else str(key)
            if key == "_target_":
                found.append((path or "(top level)", node[key]))
            else:
                found += config_targets(node._get_node(key), where)
    elif isinstance(node, ListConfig):
        for i in range(len(node)):
            found += config_targets(node._get_node(i), f"{path}[{i}]")
    return found


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def is_trusted(target: Any, prefixes: Sequence[str] = ()) -> bool:
    """Whether building ``target`` is allowed: a posx class, or a path under a trusted prefix
    that names code defined under that prefix.

    Only a path that already matches a trusted prefix is imported, so an untrusted module's
    import-time code never runs. The located object must be defined under the prefix too:
    ``posx.storage.results.os.system`` or ``mypkg.os.system`` reach ``os.system`` through an
    attribute.
    """
    if not isinstance(target, str):
        return False
    for prefix in BUILTIN:
        if _under(target, prefix):
            obj = _locate(target)
            if isinstance(obj, type) and _under(obj.__module__, prefix):
                return True
    for prefix in prefixes:
        if target == prefix:  # the user named this exact target
            return True
        if _under(target, prefix):
            module = getattr(_locate(target), "__module__", None)
            if isinstance(module, str) and _under(module, prefix):
                return True
    return False


def _locate(target: str) -> Any:
    try:
        return locate(target)
    except Exception as err:
        cause = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(f"_target_ {target!r} cannot be loaded: {cause}") from err


def needs_trust(cfg: DictConfig) -> list[str]:
    """What a run built from ``cfg`` needs trusted when it is loaded again (recorded in
    ``run.json``): the top-level package of each target that is not a posx class (the exact
    target for one inside posx that is not a posx class)."""
    needed = set()
    for _, target in config_targets(cfg):
        if isinstance(target, str) and not is_trusted(target):
            top = target.split(".")[0]
            needed.add(target if top == "posx" else top)
    return sorted(needed)


def recorded(info: dict[str, Any]) -> list[str]:
    """The ``needs_trust`` a run's ``run.json`` records (strings only; it grants nothing)."""
    value = info.get("needs_trust")
    return [p for p in value if isinstance(p, str)] if isinstance(value, list) else []


def is_recorded(info: dict[str, Any]) -> bool:
    """Whether a run's ``run.json`` records ``needs_trust`` at all (runs trained before posx
    recorded it do not: their silence says nothing about their config)."""
    return isinstance(info.get("needs_trust"), list)


def _why_untrusted(
    allow: str | None,
    recorded: Sequence[str] | None,
    unrecorded: bool,
    how: Callable[[str], str] = cli_trust,
) -> str:
    """Why a target is refused, as :func:`check_trusted`'s message says it."""
    if recorded is None:
        return "is not posx code"
    run = "is not posx code, and a run directory cannot ask to run code: "
    if allow:
        return f"{run}the run was trained with it and needs {how(allow)}"
    if unrecorded:
        # nothing suggests tampering: whether its training used this target is unknown
        return (
            f"{run}the run was trained before posx recorded what a run needs trusted "
            "(its run.json has no needs_trust), so whether its training used it is unknown"
        )
    return f"{run}its training did not record it (was the config edited?)"


def check_trusted(
    cfg: DictConfig,
    prefixes: Sequence[str],
    source: str,
    recorded: Sequence[str] | None = (),
    unrecorded: bool = False,
) -> None:
    """Refuses a config with a ``_target_`` that is neither posx's nor trusted.

    Args:
        cfg: The config about to be built.
        prefixes: What the user trusts (:func:`trusted_prefixes`).
        source: Where the config came from, for the message (a run's file, or eval-time
            overrides).
        recorded: The run's ``needs_trust`` from ``run.json``: it words the message, and
            grants nothing. ``None``: the config is the user's own (eval-time overrides).
        unrecorded: The run's ``run.json`` has no ``needs_trust`` (:func:`is_recorded`):
            the message says so instead of suspecting an edited config.

    Raises:
        UntrustedTarget: One line naming the target and how to allow it.
    """
    how = TRUST_WORDING.get()  # --trust mypkg, or trust=['mypkg'] within trust_wording()
    for where, target in config_targets(cfg):
        if is_trusted(target, prefixes):
            continue
        if not isinstance(target, str):
            shown = OmegaConf.to_yaml(target).strip() if OmegaConf.is_config(target) else target
            raise UntrustedTarget(f"{source}: _target_ of {where} is not a dotted path: {shown!r}")
        allow = next((p for p in recorded or () if _under(target, p)), None)
        why = _why_untrusted(allow, recorded, unrecorded, how)
        allow = allow or target
        raise UntrustedTarget(
            f"{source}: {where} _target_ {target!r} {why}; if you trust it, pass {how(allow)} "
            f"or set {ENV}={allow}"
        )
