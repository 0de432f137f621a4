"""``posx train`` and ``posx resume``: Hydra runs the jobs, this module decides what a job is
(train, then evaluate) and what a failure does (a sweep records it and goes on).

``posx train ARGS`` hands ARGS to a real ``@hydra.main`` function, so multirun (``-m``),
``--cfg job``, launchers and sweepers behave exactly as Hydra documents them.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from posx.checkpoint import checkpoint_dir, verify_checkpoint
from posx.config import (
    CONFIG_DIR,
    compose,
    config_dirs,
    eval_lengths,
    new_invocation,
    one_line,
    register,
    validate,
)
from posx.config_path import dirs_of_searchpath, searchpath_override, user_config_dirs
from posx.distributed import barrier, broadcast_from_main, init_process_group, world
from posx.errors import ConfigError, Interrupted, PosxError
from posx.evaluator import evaluate_run
from posx.labels import chosen_options, run_names
from posx.results import write_json
from posx.runs.evaluation import failures
from posx.runs.preflight import NO_CHECK_FLAGS, check_overrides, split_args
from posx.sweeps import sweep_status
from posx.trainer import train


def train_and_evaluate(cfg: DictConfig, run_dir: Path, names: dict[str, str]) -> dict[str, Any]:
    """One run: trains as configured, then (``train.eval_at_end``) evaluates at the eval lengths
    with the trained model in memory. Under torchrun rank 0 evaluates while the others wait.

    Returns:
        The training summary (final loss, tokens/s, parameters, seconds, world size).

    Raises:
        PosxError: An eval length failed (its row, with the reason, is written first).
    """
    result = train(cfg, run_dir, names)
    w = world()
    failed: list[str] = []
    if cfg.train.eval_at_end and w.is_main:
        lengths = eval_lengths(cfg)
        rows = evaluate_run(run_dir, lengths, model=result.model, task=result.task, cfg=cfg)
        failed = failures(rows)
    barrier(w)
    if failed:  # the rows (with their reasons) are written; the run must not look finished
        raise PosxError(f"evaluation failed at {'; '.join(failed)}")
    return result.summary


def _names(cfg: DictConfig) -> dict[str, str]:
    """The run's labels, as its directory name has them (``${posx_run_name:}``)."""
    hc = HydraConfig.get()
    return run_names(cfg, chosen_options(hc.runtime.choices, dirs_of_searchpath(hc.searchpath)))


def _job(cfg: DictConfig, debug: bool) -> float | None:
    """One Hydra job; in a sweep a failure is recorded in the run's ``run.json`` and the sweep
    goes on (the caller counts the failures afterwards)."""
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    try:
        validate(cfg)
        return train_and_evaluate(cfg, run_dir, _names(cfg))["final_loss"]
    except Interrupted as err:  # Ctrl-C: the run is resumable, the sweep stops
        print(f"posx: {err}", file=sys.stderr)
        raise SystemExit(err.exit_code) from err
    except KeyboardInterrupt as err:  # a second Ctrl-C: stop now, without a new checkpoint
        try:
            checkpoint_dir(run_dir)
            kept = f"resume from the last checkpoint: posx resume {run_dir}"
        except PosxError:
            kept = "no checkpoint was saved"
        message = f"stopped at once by a second Ctrl-C; {kept}"
        if world().is_main:
            mark_failed(run_dir, message)
        print(f"posx: {message}", file=sys.stderr)
        raise SystemExit(130) from err
    except Exception as err:
        message = one_line(err)
        if not isinstance(err, PosxError):
            message = f"{type(err).__name__}: {message}"
        if world().is_main:
            mark_failed(run_dir, message)
        if debug:
            traceback.print_exc()
        if hc.mode == RunMode.MULTIRUN:
            print(f"posx: run {run_dir.name} failed: {message}", file=sys.stderr)
            return None
        print(f"posx: error: {message}", file=sys.stderr)
        raise SystemExit(err.exit_code if isinstance(err, PosxError) else 1) from err


def mark_failed(run_dir: Path, message: str) -> None:
    """Records the failure in ``run.json`` (what `posx sweep status` reads)."""
    info_path = run_dir / "run.json"
    try:
        info = json.loads(info_path.read_text()) if info_path.is_file() else {"run": run_dir.name}
        write_json(info_path, {**info, "status": "failed", "error": message})
    except (OSError, ValueError):
        pass  # the run dir itself is unwritable: the message on stderr is all we can leave


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


def run_train(args: list[str], debug: bool = False, dirs: list[Path] | None = None) -> None:
    """``posx train ARGS``: checks the overrides, then runs Hydra with ARGS.

    Args:
        args: Hydra's flags and overrides, as after ``posx train``.
        debug: Print tracebacks of failed runs.
        dirs: The user's config dirs (default: from ``POSX_CONFIG_PATH``); ``--config-dir`` and
            ``hydra.searchpath=`` in ``args`` add to them.

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
        check_overrides(overrides, build="--cfg" not in flags and "-c" not in flags, dirs=dirs)
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

    @hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")
    def hydra_train(cfg: DictConfig) -> float | None:
        return _job(cfg, debug)

    # @hydra.main reads its arguments from sys.argv: Hydra has no public call that takes a list.
    saved_argv = sys.argv
    sys.argv = ["posx train", *flags, *overrides, *extra]
    try:
        hydra_train()
    except ValueError as err:  # Hydra's own usage errors, e.g. -m together with --cfg
        raise ConfigError(one_line(err)) from err
    finally:
        sys.argv = saved_argv
    if multirun and not NO_CHECK_FLAGS & set(flags) and "--cfg" not in flags:
        _raise_if_jobs_failed(sweep_dir_of([*overrides, *extra], dirs))


def _raise_if_jobs_failed(sweep_dir: Path) -> None:
    """Counts the sweep's failed jobs from their ``run.json`` files, which every launcher's
    workers write, so the exit code is right for joblib and submitit workers too."""
    if not (sweep_dir / "multirun.yaml").is_file():
        return
    failed = [j.run_dir.name for j in sweep_status(sweep_dir) if j.status == "failed" and j.run_dir]
    if failed:
        raise PosxError(f"{len(failed)} run(s) of the sweep failed: {', '.join(failed)}")


def run_resume(run_dir: Path, debug: bool = False, dirs: list[Path] | None = None) -> None:
    """``posx resume RUN``: trains RUN on from its checkpoint with its own overrides, and the
    user config dirs it was trained with (``dirs``, default: from ``POSX_CONFIG_PATH``, come
    first, for a config dir that moved)."""
    overrides_file = run_dir / ".hydra" / "overrides.yaml"
    if not overrides_file.is_file():
        raise ConfigError(f"not a posx run directory (no .hydra/overrides.yaml): {run_dir}")
    verify_checkpoint(run_dir, resume=True)  # damage fails here, before run.json is touched
    overrides = [str(o) for o in OmegaConf.load(overrides_file)]
    overrides = [o for o in overrides if not o.startswith(("train.resume=", "hydra."))]
    hydra_file = run_dir / ".hydra" / "hydra.yaml"
    recorded = (
        OmegaConf.select(OmegaConf.load(hydra_file), "hydra.searchpath") or []
        if hydra_file.is_file()
        else []
    )
    current = user_config_dirs() if dirs is None else dirs
    known = [d for d in dirs_of_searchpath(recorded) if d.is_dir()]  # a moved one: see `dirs`
    dirs = user_config_dirs([*current, *known], env=False)
    run_train([*overrides, "train.resume=true", f"hydra.run.dir={run_dir}"], debug, dirs)
