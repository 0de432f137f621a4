"""``posx train`` and ``posx resume``: the overrides are checked, then Hydra runs the jobs
(:mod:`posx.runs.job` says what a job is: train, then evaluate, and what a failure does).

``posx train ARGS`` hands ARGS to a real ``@hydra.main`` function, so multirun (``-m``),
``--cfg job``, launchers and sweepers behave exactly as Hydra documents them.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import hydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from posx.config.compose import CONFIG_DIR, compose, config_dirs, new_invocation, register
from posx.config.hints import one_line
from posx.config.keys import override_key
from posx.config.paths import searchpath_override, user_config_dirs
from posx.errors import ConfigError, PosxError
from posx.runs.callbacks import sweep_started_since, sweeps_started
from posx.runs.compose_once import composes_shared
from posx.runs.messages import sweep_summary
from posx.runs.preflight import NO_CHECK_FLAGS, check_overrides, split_args
from posx.runs.sweeps import sweep_status
from posx.storage.results import results_root

# Settings posx sets itself for a job (an extension's lineage, the invocation that names the run
# or sweep): recorded in each run, left out of the launchers' one line per job, which shows what
# the user chose (the parent's settings and theirs, and which run an extension starts from).
INTERNAL_KEYS = ("extend.parent_sha256", "extend.parent_fingerprint", "extend.parent_label",
                 "extend.parent_step", "extend.base_length", "extend.parent_length",
                 "extend.base_factor", "invocation")  # fmt: skip
INTERNAL = re.compile(rf" (?:{'|'.join(map(re.escape, INTERNAL_KEYS))})=(?:'(?:[^'\\]|\\.)*'|\S+)")
# The launchers' loggers: each logs `#N : OVERRIDES` per job.
LAUNCHER_LOGGERS = ("hydra._internal.core_plugins.basic_launcher",
                    "hydra_plugins.hydra_joblib_launcher._core",
                    "hydra_plugins.hydra_submitit_launcher.submitit_launcher")  # fmt: skip


class _WithoutInternalKeys(logging.Filter):
    """Drops :data:`INTERNAL_KEYS` from a launcher's line for a job."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if "#" in text and "=" in text:
            record.msg, record.args = INTERNAL.sub("", text), ()
        return True


_QUIET = _WithoutInternalKeys()
for _name in LAUNCHER_LOGGERS:
    logging.getLogger(_name).addFilter(_QUIET)


def sweep_dir_of(overrides: list[str], dirs: list[Path] | None = None) -> Path:
    """The sweep directory ``posx train -m OVERRIDES`` writes into (``hydra.sweep.dir``),
    resolved as Hydra's launchers do: from the overrides that are not swept."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    cfg = compose(fixed, dirs, hydra_node=True)
    return Path(OmegaConf.select(cfg, "hydra.sweep.dir"))


def _config_dir_flags(flags: list[str]) -> tuple[list[str], list[str]]:
    """Hydra's ``--config-dir DIR`` / ``-cd DIR`` after ``posx train``, and the other flags:
    posx adds such a dir to the user's config dirs (Hydra alone would, but posx's checks would
    not know its options)."""
    dirs, rest, take = [], [], False
    for flag in flags:
        if take:
            dirs.append(flag)
            take = False
        elif flag in ("--config-dir", "-cd"):
            take = True
        elif flag.startswith("--config-dir="):
            dirs.append(flag.split("=", 1)[1])
        else:
            rest.append(flag)
    return dirs, rest


def run_train(
    args: list[str],
    debug: bool = False,
    dirs: list[Path] | None = None,
    trust: Sequence[str] | None = None,
    configs_checked: bool = False,
) -> None:
    """``posx train ARGS``: checks the overrides, then runs Hydra with ARGS.

    Args:
        args: Hydra's flags and overrides, as after ``posx train``.
        debug: Print tracebacks of failed runs.
        dirs: The user's config dirs (default: from ``POSX_CONFIG_PATH``); ``--config-dir`` and
            ``hydra.searchpath=`` in ``args`` add to them.
        trust: For ARGS that come from a run directory (``posx resume``) rather than the
            user's command line: only posx's and trusted ``_target_`` classes are then built.
        configs_checked: The caller composed and checked every combination of ARGS already
            (``posx extend``'s plan): only Hydra's own settings are checked here.

    Raises:
        ConfigError: A bad override or Hydra usage error (before any run starts).
        PosxError: A single run failed, or some runs of a sweep did (after all ran).
    """
    flags, overrides = split_args(args)
    flag_dirs, flags = _config_dir_flags(flags)
    base = user_config_dirs() if dirs is None else dirs
    dirs, overrides = config_dirs(user_config_dirs([*base, *flag_dirs], env=False), overrides)
    multirun = bool({"-m", "--multirun"} & set(flags))
    if not NO_CHECK_FLAGS & set(flags):
        build = "--cfg" not in flags and "-c" not in flags
        check_overrides(overrides, build, dirs, trust, configs_checked=configs_checked)
    # only now, the overrides checked: a mistyped one is answered without waiting for torch
    from posx.runtime.distributed import broadcast_from_main, init_process_group

    w = init_process_group()
    if w.distributed and multirun:
        raise ConfigError("torchrun runs one training job; launch sweeps without torchrun")
    extra = searchpath_override(dirs)
    if not any(o.split("=", 1)[0].lstrip("+") == "invocation" for o in overrides):
        # every rank (and every launcher worker) must resolve one run or sweep directory
        extra.append(f"invocation={broadcast_from_main(new_invocation(), w)}")
    if w.distributed and not w.is_main:  # only rank 0 writes Hydra's files and logs
        extra += [
            "hydra.output_subdir=null",
            "hydra/job_logging=disabled",
            "hydra/hydra_logging=disabled",
        ]
    register()
    checked = not NO_CHECK_FLAGS & set(flags) and "--cfg" not in flags

    @hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")
    def hydra_train(cfg: DictConfig) -> float | None:
        from posx.runs.job import run_job

        return run_job(cfg, debug, trust)

    if multirun and not any(override_key(o) == "hydra.mode" for o in [*overrides, *extra]):
        # what Hydra appends itself once it has composed the config to read the mode; given
        # here, that compose and the multirun's are one (composes_shared)
        extra.append("hydra.mode=MULTIRUN")
    # @hydra.main reads its arguments from sys.argv: Hydra has no public call that takes a list.
    saved_argv = sys.argv
    sys.argv = ["posx train", *flags, *overrides, *extra]
    mark = sweeps_started()
    try:
        with composes_shared():
            hydra_train()
    except ValueError as err:  # Hydra's own usage errors, e.g. -m together with --cfg
        raise ConfigError(one_line(err)) from err
    finally:
        sys.argv = saved_argv
    if multirun and checked:
        # Hydra named the sweep's directory as it started it (posx.runs.callbacks), unless
        # the user's config took that callback away
        sweep_dir = sweep_started_since(mark) or sweep_dir_of([*overrides, *extra], dirs)
        _end_of_sweep(sweep_dir, _compare_root(sweep_dir, overrides))


def _compare_root(sweep_dir: Path, overrides: list[str]) -> Path:
    """Where ``posx report`` compares a sweep's runs: the sweep, or for extensions the folder
    that holds both the sweep and their parent (the sweep alone leaves the base out)."""
    parents = {o.split("=", 1)[1].strip("'\"") for o in overrides
               if o.split("=", 1)[0].lstrip("+") == "extend.parent"}  # fmt: skip
    if len(parents) != 1:
        return sweep_dir
    common = Path(os.path.commonpath([sweep_dir.resolve(), Path(parents.pop()).resolve()]))
    # a parent in another results root: no folder holds both but one far too wide
    return common if common.is_relative_to(results_root(sweep_dir)) else sweep_dir


def _end_of_sweep(sweep_dir: Path, compare: Path) -> None:
    """Prints where the sweep is and what to run next; raises when jobs failed.

    The failed jobs are counted from their ``run.json`` files, which every launcher's workers
    write, so the exit code is right for joblib and submitit workers too.
    """
    if not (sweep_dir / "multirun.yaml").is_file():
        return
    jobs = sweep_status(sweep_dir)
    failed = [j.run_dir.name for j in jobs if j.status == "failed" and j.run_dir]
    print("\n".join(sweep_summary(sweep_dir, len(jobs), failed, compare)), flush=True)
    if failed:
        raise PosxError(f"{len(failed)} run(s) of the sweep failed: {', '.join(failed)}")
