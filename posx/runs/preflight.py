"""Checks run before Hydra starts, so that a typo or an impossible setting fails in one line with
exit code 2 instead of half-way through a sweep."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import DictConfig

from posx.config.build import build_model, build_positions, build_task
from posx.config.compose import check_group_value, compose, eval_lengths
from posx.config.hints import ListValueError
from posx.config.paths import user_config_dirs
from posx.config.trust import check_trusted
from posx.config.validate import validate
from posx.errors import ConfigError, PosxError
from posx.runs.overrides import list_sweep, parse_overrides, unknown_flag
from posx.storage.results import check_writable
from posx.tracking import check_loggers

if TYPE_CHECKING:  # torch comes with building: a mistyped override is refused before that
    from posx.encodings.base import PositionalEncoding
    from posx.positions import PositionStrategy
    from posx.tasks.base import Task

# Hydra's command-line flags that take a value (``-m``/``--multirun`` and friends take none).
# Hydra has no public API for its argument parser, so this mirrors ``hydra --help``.
VALUE_FLAGS = frozenset(
    {
        "--cfg",
        "-c",
        "--package",
        "-p",
        "--config-path",
        "-cp",
        "--config-name",
        "-cn",
        "--config-dir",
        "-cd",
        "--experimental-rerun",
        "--shell-completion",
        "-sc",
    }
)
# Flags after which Hydra runs no job, so there is nothing to check.
NO_CHECK_FLAGS = frozenset(
    {
        "--help",
        "-h",
        "--hydra-help",
        "--version",
        "--info",
        "-i",
        "--shell-completion",
        "-sc",
        "--experimental-rerun",
    }
)
# Hydra's flags that take no value and still run a job.
JOB_FLAGS = frozenset({"-m", "--multirun", "-r", "--run", "--resolve"})
# Sweeps larger than this are checked on their first combinations only.
MAX_CHECKED = 64
# Launchers whose jobs run on this machine: only there must train.device exist here (a SLURM
# sweep is launched from a login node without the GPUs its jobs will have).
LOCAL_LAUNCHERS = frozenset({"basic", "local_parallel"})


def split_args(args: list[str]) -> tuple[list[str], list[str]]:
    """Separates Hydra's own flags (with their values) from config overrides.

    Raises:
        ConfigError: A flag Hydra does not have (``--encoding alibi``), naming the override
            that was meant (``encoding=alibi``).
    """
    flags, overrides, take_value = [], [], False
    for i, arg in enumerate(args):
        if take_value:
            flags.append(arg)
            take_value = False
        elif arg.startswith("-"):
            if arg.split("=", 1)[0] not in VALUE_FLAGS | NO_CHECK_FLAGS | JOB_FLAGS:
                after = args[i + 1] if i + 1 < len(args) else ""
                value = after if after and "=" not in after and not after.startswith("-") else None
                raise ConfigError(unknown_flag("train", arg, value))
            flags.append(arg)
            take_value = arg in VALUE_FLAGS
        else:
            overrides.append(arg)
    return flags, overrides


def check_overrides(
    overrides: list[str],
    build: bool = True,
    dirs: list[Path] | None = None,
    trust: Sequence[str] | None = None,
    configs_checked: bool = False,
) -> None:
    """Composes, validates and (with ``build``) instantiates every value of every override.

    Each value of each sweep is checked at least once, the other overrides at their first value.
    ``dirs`` are the user's config dirs (default: from ``POSX_CONFIG_PATH``).
    With ``trust`` (overrides read from a run directory, not typed by the user), a ``_target_``
    that is neither posx's nor under a trusted prefix is refused before anything is built.
    With ``configs_checked`` (the caller composed and checked each combination itself with
    :func:`check_config`, as ``posx extend`` does), only Hydra's own settings are checked: a
    second compose and build of each would double the start-up of every launch.
    """
    dirs = user_config_dirs() if dirs is None else dirs
    parsed = parse_overrides(overrides, dirs)
    options, hydra_overrides = _options(parsed, dirs)
    combos = _combinations(options)
    if hydra_overrides:  # e.g. an unknown launcher: one line here instead of Hydra's report
        compose([*min(combos), *hydra_overrides], dirs, hydra_node=True)
    if configs_checked:
        return
    here = runs_here(hydra_overrides)
    for combo in itertools.islice(sorted(combos), MAX_CHECKED):
        try:
            cfg = compose(list(combo), dirs)
        except ListValueError as err:  # `eval.lengths=32,64`: the user's line names the fix
            typed = [o for o in parsed if o.key_or_group == err.key and o.is_sweep_override()]
            raise (ConfigError(list_sweep(typed[0])) if typed else err) from err
        check_config(cfg, build, trust, here)


def runs_here(overrides: Sequence[str]) -> bool:
    """Whether the jobs of these overrides run on this machine: no ``hydra/launcher=`` or a
    local one (``basic``, ``local_parallel``), not a cluster's (``slurm``)."""
    for o in overrides:
        key, _, value = o.partition("=")
        if key.lstrip("+~") == "hydra/launcher" and value not in LOCAL_LAUNCHERS:
            return False
    return True


def override_combinations(overrides: list[str], dirs: list[Path]) -> list[list[str]]:
    """The combinations of ``key=value`` that check each value of each sweep once (the other
    overrides at their first value), Hydra's own settings left out: what
    :func:`check_overrides` composes, for a caller's own checks (``posx extend``'s shapes)."""
    options, _ = _options(parse_overrides(overrides, dirs), dirs)
    return [list(c) for c in sorted(_combinations(options))]


def _options(parsed: list[Override], dirs: list[Path]) -> tuple[list[list[str]], list[str]]:
    """Every value of each config override as ``key=value`` (a config group's options checked
    to exist), and the ``hydra...`` overrides apart.

    Returns:
        One list of ``key=value`` per override that is not Hydra's, and the Hydra overrides
        that are not sweeps (``hydra/launcher=...``, ``hydra.job.chdir=...``): those are
        checked once, on their own.
    """
    options: list[list[str]] = []
    hydra_overrides = []
    for o in parsed:
        key = o.get_key_element()
        if key.lstrip("+~").startswith("hydra"):
            if not o.is_sweep_override():
                hydra_overrides.append(o.input_line)
            continue
        values = _values(o)
        if values is None:
            continue
        for v in values:
            check_group_value(o.key_or_group, v, dirs)
        options.append([f"{key}={v}" for v in values])
    return options, hydra_overrides


def _values(o: Override) -> list[str] | None:
    """The values an override takes (one unless it sweeps); None for sweeps that Hydra expands
    itself, such as ``glob()``, which are left to Hydra."""
    try:
        if o.is_sweep_override():
            return list(o.sweep_string_iterator())
        return [o.get_value_element_as_str()]
    except HydraException:
        return None


def _combinations(options: list[list[str]]) -> set[tuple[str, ...]]:
    """The combinations that check each value once: every override at its first value, then
    each other value of each override with the rest at their first."""
    combos = {tuple(o[0] for o in options)}
    for i, opts in enumerate(options):
        for v in opts[1:]:
            combos.add(tuple(v if j == i else o[0] for j, o in enumerate(options)))
    return combos


def check_config(cfg: DictConfig, build: bool, trust: Sequence[str] | None, here: bool) -> None:
    """Validates one composed combination and, with ``build``, builds what it would train
    (``here``: its job runs on this machine, so its device must exist here)."""
    validate(cfg)
    check_loggers(cfg)  # a tracker that is not installed: one line, before any run starts
    if trust is not None:
        check_trusted(cfg, trust, "the run's overrides")
    if build:
        check_buildable(cfg, here)


def check_buildable(cfg: DictConfig, here: bool = True) -> None:
    """Builds the task, model and position strategy of a validated config and draws one tiny
    batch, so that what cannot train fails before any run directory exists.

    Args:
        cfg: The validated config.
        here: The run trains on this machine: ``train.device`` must exist here
            (``train.device=cuda`` without CUDA is refused). A cluster launcher's jobs run
            elsewhere; their device is checked by the job.
    """
    import torch

    from posx.runtime.distributed import pick_device

    check_writable(Path(cfg.root))
    if here:
        pick_device(cfg.train.device)  # no CUDA for train.device=cuda: one line, exit 2
    task = build_task(cfg)
    check_memory(cfg, task.vocab_size)  # before anything sized by the config exists
    model = build_model(cfg, task.vocab_size)
    strategy = build_positions(cfg)
    check_structure(task, model.encoding, strategy)
    strategy.check(model.encoding, cfg.train.length, task.longest_number(cfg.train.length))
    # one tiny batch: a length too short for the task fails here
    task.train_batch(1, cfg.train.length, torch.Generator().manual_seed(0))


def check_structure(task: Task, encoding: PositionalEncoding, strategy: PositionStrategy) -> None:
    """Refuses positions that read a task's numbers on a task without them, and an encoding
    that needs such positions without them: either would train plain positions under a label
    that says otherwise (``rope+coupling`` on text).

    Raises:
        ConfigError: One line naming the options and what to choose instead.
    """
    task_name = type(task).__name__
    if strategy.needs_structure and not task.has_structure:
        raise ConfigError(
            f"positions={strategy.name} places each digit by its number and significance, and "
            f"task {task_name} has no numbers to read (only task=arithmetic has): use it with "
            "task=arithmetic, or another positions option here"
        )
    if encoding.needs_structure and not strategy.needs_structure:
        raise ConfigError(
            f"encoding {type(encoding).__name__} indexes its table by a digit's place, which "
            f"positions={strategy.name} does not give it: train it with positions=abacus on "
            "task=arithmetic"
        )


def check_memory(cfg: DictConfig, vocab_size: int) -> None:
    """Refuses a training step, or an evaluation at the end of training, that cannot fit in
    ``train.max_memory`` (or the memory available), from the model's shape on the ``meta``
    device: nothing is allocated."""
    from posx.runs.resources import (
        ModelShape,
        check_eval_fits,
        check_fits,
        model_for_estimates,
        train_step_bytes,
    )
    from posx.runs.sizes import parse_size
    from posx.runtime.distributed import pick_device

    try:
        device = pick_device(cfg.train.device)
    except PosxError:  # no CUDA here for a cluster's job: the job itself reports it
        return
    limit = parse_size(cfg.train.max_memory, "train.max_memory")
    model = model_for_estimates(cfg, vocab_size)
    t = cfg.train
    hint = "lower train.length or train.batch_size (or set train.max_memory=SIZE)"
    need = train_step_bytes(ModelShape.of(model, device), t.batch_size, t.length)
    check_fits(need, f"a training step (batch {t.batch_size} x length {t.length})", device,
               limit, hint)  # fmt: skip
    if t.eval_at_end:
        hint = "lower eval.lengths or eval.batch_tokens (or set train.max_memory=SIZE)"
        check_eval_fits(cfg, model, build_positions(cfg), eval_lengths(cfg), device, limit,
                        "evaluating after training", hint)  # fmt: skip
