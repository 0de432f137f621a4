"""``posx extend RUN [overrides]``: context extension by fine-tuning. A new run starts from RUN's
final weights, with RUN's own overrides as its base and the user's on top (``train.length``,
``encoding.scaling.*``, ``positions=pose``, ``extension=yarn``, ...); a fresh optimizer and
schedule; the data order goes on from the parent's (held-in text only).

Every method is a config (configs/extension/): nothing here asks which one it is. The parent is
untrusted input, checked as ``posx resume`` checks a run, and only read: the extension writes
its own run directory under the parent's results root. Its ``run.json`` records the lineage
(:func:`posx.training.record.lineage`).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from posx.config.compose import compose
from posx.config.keys import at_or_below, override_key
from posx.config.paths import user_config_dirs
from posx.errors import ConfigError, Interrupted, PosxError, PosxWarning
from posx.runs.extend.length import PARENT_ONLY, Lengths, launch_lengths
from posx.runs.extend.longrope import search_overrides, searched_keys, searches, wants_search
from posx.runs.extend.methods import (
    GROUP,
    TARGET,
    chosen_methods,
    method_keys,
    refused_pairs,
    with_methods,
)
from posx.runs.extend.parent import check_parent, parents_of
from posx.runs.launch import run_train
from posx.runs.preflight import (
    check_config,
    override_combinations,
    runs_here,
    split_args,
)
from posx.runs.shapes import check_shapes
from posx.saved import SavedRun

# What `posx extend` sets itself (the user's choice among them: extend.resize).
OWN_KEYS = ("extend.parent", "extend.parent_sha256", "extend.parent_fingerprint",
            "extend.parent_label", "extend.parent_step", "extend.base_length",
            "extend.parent_length", "extend.base_factor",
            "extend.longrope.searched")  # fmt: skip
RESIZE = ("none", "interpolate", "copy")


def check_user_overrides(overrides: list[str]) -> None:
    """Refuses what an extension cannot change: its data (``task``: it reads on through its
    parent's held-in text) and the ``extend.*`` settings ``posx extend`` sets itself."""
    for o in overrides:
        key = override_key(o)
        if key == "task" or key.startswith("task."):
            raise ConfigError(
                f"{o!r}: an extension trains on its parent's data (the held-in text it read); "
                "extend a run trained on the data you want instead"
            )
        if key in OWN_KEYS:
            raise ConfigError(f"{o!r}: posx extend sets {key} itself from RUN")
        if key == "extend.resize" and o.split("=", 1)[1] not in RESIZE:
            raise ConfigError(f"{o!r}: extend.resize must be one of {', '.join(RESIZE)}")


def _set_by(key: str, keys: set[str]) -> bool:
    """Whether a parent's override of ``key`` is replaced by a setting of ``keys``: the same
    key, or one above it. A setting below it does not replace it: a method that sets
    ``encoding.scaling.type`` keeps the parent's ``encoding=alibi`` (dropping it composed the
    default encoding, RoPE, under the parent's ALiBi weights)."""
    return at_or_below(key, keys)


def _kept(
    parent: dict[str, Any], user: list[str], dirs: list[Path], methods: list[str]
) -> list[str]:
    """The parent's overrides that none of the user's replaces: not the same key, nor a key
    set by the yaml of one of ``methods`` (the method's settings come before the parent's
    command line), nor how the parent itself was extended (its factor and length, the
    LongRoPE factors its search found)."""
    keys = {override_key(o) for o in user} | set(PARENT_ONLY) | searched_keys(parent["cfg"])
    for name in methods:
        keys |= method_keys(name, dirs)
    return [o for o in parent["overrides"] if not _set_by(override_key(o), keys)]


def _merged(parent: dict[str, Any], user: list[str], dirs: list[Path]) -> list[str]:
    """The overrides of one extension launch: the parent's that the user's do not replace,
    the user's, then posx extend's own ``extend.*`` settings."""
    methods = chosen_methods(user)
    return [*_kept(parent, user, dirs, methods), *user, *parent["settings"]]


def split_methods(user: list[str], dirs: list[Path], parent: dict[str, Any]) -> list[list[str]]:
    """The user's overrides as one Hydra launch, or once per value of an ``extension=a,b,c``
    sweep when the methods' yamls replace different settings of the parent's command line
    (each method must replace only its own)."""
    methods = chosen_methods(user)
    kept = {tuple(_kept(parent, user, dirs, [m])) for m in methods}
    # a method that searches before its launch (LongRoPE) is a launch of its own
    if len(kept) <= 1 and not (len(methods) > 1 and any(searches(m, dirs) for m in methods)):
        return [user]
    return [with_methods(user, [m]) for m in methods]


def _check_class(run: SavedRun, parent: dict[str, Any], cfg: DictConfig, user: list[str]) -> None:
    """Refuses an extension whose encoding class is not its parent's, unless the user named
    ``encoding._target_`` (the weights were trained under the parent's class)."""
    theirs = OmegaConf.select(parent["cfg"], "encoding._target_")
    ours = OmegaConf.select(cfg, "encoding._target_")
    if theirs != ours and not any(override_key(o) == TARGET for o in user):
        raise ConfigError(
            f"cannot extend {run.path}: these overrides replace its encoding {theirs} with "
            f"{ours}; an extension keeps its parent's encoding (name {TARGET}=... to replace "
            "it on purpose)"
        )


def _say(line: str) -> None:
    """A progress line of the work before a launch (LongRoPE's search), on stderr."""
    print(line, file=sys.stderr, flush=True)


def _launches(
    run: SavedRun,
    parent: dict[str, Any],
    user: list[str],
    dirs: list[Path],
    trust: Sequence[str] = (),
) -> list[list[str]]:
    """The overrides of each Hydra launch for one parent and one method launch, every
    combination checked as ``posx train`` checks one (validated, ``trust`` for the classes,
    built), and for the extension (encoding class, shapes); one launch per distinct factor and
    length (a sweep over ``extend.factor`` sets a length per value)."""
    keys = {override_key(o) for o in user}
    placeholder = [] if "extend.length" in keys else [f"extend.length={parent['cfg'].train.length}"]
    configs: dict[tuple[str, ...], tuple[DictConfig, Lengths]] = {}
    searched: dict[Lengths, list[str]] = {}  # extension=longrope: the factors found per launch

    def composed(combo: list[str]) -> tuple[DictConfig, Lengths]:
        if tuple(combo) not in configs:  # the factor first, then the config at its lengths
            probe = compose([*_merged(parent, combo, dirs), *placeholder], dirs)
            lengths = launch_lengths(probe, parent["cfg"], keys)
            launch = [*_merged(parent, combo, dirs), *lengths.settings()]
            cfg = lengths.applied(probe)
            if wants_search(cfg):
                if len(combos) > 1:
                    raise ConfigError(
                        "extension=longrope searches its factors for one launch; run each "
                        "combination of a sweep as its own posx extend"
                    )
                searched[lengths] = search_overrides(run, cfg, launch, dirs, _say)
                cfg = compose([*launch, *searched[lengths]], dirs)
            configs[tuple(combo)] = cfg, lengths
        return configs[tuple(combo)]

    combos = override_combinations(user, dirs) or [[]]
    groups: dict[Lengths, list[list[str]]] = {}
    for combo in combos:
        cfg, lengths = composed(combo)
        _check_class(run, parent, cfg, user)
        # what cannot train (PoSE's positions for Abacus, no CUDA here) fails here, and the
        # launch does not check it again
        check_config(cfg, build=True, trust=trust, here=runs_here(user))
        groups.setdefault(lengths, []).append(combo)
    check_shapes(run, combos, lambda combo: composed(combo)[0])
    if len(groups) == 1:
        ((lengths, _),) = groups.items()
        return [[*_merged(parent, user, dirs), *lengths.settings(), *searched.get(lengths, [])]]
    out = []
    for lengths in groups:  # the factor (and length) pinned, the other sweeps kept
        pinned = [o for o in user if override_key(o) not in PARENT_ONLY]
        pinned.append(f"extend.factor={lengths.factor}")
        if lengths.explicit_length:
            pinned.append(f"extend.length={lengths.length}")
        out.append([*_merged(parent, pinned, dirs), *lengths.settings()])
    return out


def _plan(path: Path, user: list[str], dirs: list[Path], trust: Sequence[str]) -> list[Launch]:
    """Every launch of ``posx extend PATH``, checked before any starts; each (parent, method)
    pair whose method does not fit the parent's encoding is left out with a warning line, and
    refused when nothing is left."""
    launches: list[Launch] = []
    skipped: list[str] = []
    for run in parents_of(path):  # every parent and override is checked before any run starts
        parent = check_parent(run, dirs, trust)
        fit, refused = refused_pairs(user, parent["cfg"].get("encoding"), parent["label"], dirs)
        pairs = refused.items()
        skipped += [f"{run.path} ({parent['label']}) with {GROUP}={m}: {why}" for m, why in pairs]
        if refused and not fit:
            continue
        mine = with_methods(user, fit) if refused else user
        for method in split_methods(mine, dirs, parent):
            try:
                launches += [
                    Launch(run, args) for args in _launches(run, parent, method, dirs, trust)
                ]
            except ConfigError as err:
                if len(chosen_methods(user)) < 2:
                    raise
                names = ",".join(chosen_methods(method))  # a sweep goes on without the pair
                skipped.append(f"{run.path} ({parent['label']}) with {GROUP}={names}: {err}")
    if not launches and skipped:
        more = f" (and {len(skipped) - 1} more pair(s) that do not fit)" if len(skipped) > 1 else ""
        raise ConfigError(f"cannot extend {skipped[0]}{more}")
    for line in skipped:
        warnings.warn(f"skipped {line}", PosxWarning, stacklevel=2)
    return launches


@dataclass(frozen=True)
class Launch:
    """One Hydra launch of ``posx extend``: the parent and the whole override list."""

    run: SavedRun
    overrides: list[str]


def run_extend(
    path: Path,
    args: list[str],
    debug: bool = False,
    dirs: list[Path] | None = None,
    trust: Sequence[str] = (),
) -> None:
    """``posx extend PATH ARGS``: one extension of each parent (PATH, or every run trained from
    scratch under it), each with ARGS (Hydra's flags and overrides; ``-m`` sweeps, one sweep
    per parent). A method that does not fit a parent's encoding is left out for that parent
    with one warning line (refused when no pair is left).

    Args:
        path: A run directory, or a sweep or results root of runs to extend.
        args: As after ``posx train``: overrides of the parent's config, and Hydra's flags.
        debug: Print tracebacks of failed runs.
        dirs: The user's config dirs (default: from ``POSX_CONFIG_PATH``).
        trust: Trusted ``_target_`` prefixes for the parent's classes (``--trust``).

    Raises:
        ConfigError: A missing, damaged, unfinished or untrusted parent, a bad override, one
            that changes a parameter's shape or the encoding's class, or methods that fit no
            parent (before any run starts).
        PosxError: A run failed (after every parent's extensions ran).
    """
    dirs = user_config_dirs() if dirs is None else dirs
    flags, user = split_args(args)
    check_user_overrides(user)
    launches = _plan(path, user, dirs, trust)
    failed = []
    for launch in launches:
        try:
            run_train([*flags, *launch.overrides], debug, dirs, trust, configs_checked=True)
        except Interrupted:
            raise
        except PosxError as err:
            if len(launches) == 1:
                raise
            failed.append(f"{launch.run.name}: {err}")
    if failed:
        raise PosxError(f"extensions of {len(failed)} launch(es) failed: {'; '.join(failed)}")
