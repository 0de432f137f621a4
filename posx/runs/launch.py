"""``posx train`` and ``posx resume``: Hydra runs the jobs, this module decides what a job is
(train, then evaluate) and what a failure does (a sweep records it and goes on).

``posx train ARGS`` hands ARGS to a real ``@hydra.main`` function, so multirun (``-m``),
``--cfg job``, launchers and sweepers behave exactly as Hydra documents them.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import hydra
import yaml
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posx.checkpoint import check_identity, checkpoint_dir, verify_checkpoint
from posx.config import CONFIG_DIR, compose, new_invocation, one_line, register, validate
from posx.distributed import barrier, broadcast_from_main, init_process_group, world
from posx.errors import ConfigError, Interrupted, PosxError
from posx.evaluate import evaluate_run
from posx.results import check_writable, run_info, write_json
from posx.runs.preflight import NO_CHECK_FLAGS, check_overrides, split_args
from posx.sweeps import sweep_status
from posx.train import train
from posx.trust import check_trusted, recorded


def train_and_evaluate(cfg: DictConfig, run_dir: Path, names: dict[str, str]) -> dict[str, Any]:
    """One run: trains as configured, then (``train.eval_at_end``) evaluates at ``eval.lengths``
    with the trained model in memory. Under torchrun rank 0 evaluates while the others wait.

    Returns:
        The training summary (final loss, tokens/s, parameters, seconds, world size).
    """
    result = train(cfg, run_dir, names)
    w = world()
    if cfg.train.eval_at_end and w.is_main:
        lengths = list(cfg.eval.lengths)
        evaluate_run(run_dir, lengths, model=result.model, task=result.task, cfg=cfg)
    barrier(w)
    return result.summary


def _names() -> dict[str, str]:
    chosen = HydraConfig.get().runtime.choices
    return {g: str(chosen.get(g) or "custom") for g in ("encoding", "task", "model", "positions")}


def _job(cfg: DictConfig, debug: bool, trust: Sequence[str] | None = None) -> float | None:
    """One Hydra job; in a sweep a failure is recorded in the run's ``run.json`` and the sweep
    goes on (the caller counts the failures afterwards). With ``trust`` (a resumed run), only
    posx's and trusted ``_target_`` classes are built."""
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    try:
        if trust is not None:
            check_trusted(cfg, trust, "the run's overrides")
        validate(cfg)
        return train_and_evaluate(cfg, run_dir, _names())["final_loss"]
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


def sweep_dir_of(overrides: list[str]) -> Path:
    """The sweep directory ``posx train -m OVERRIDES`` writes into (``hydra.sweep.dir``),
    resolved as Hydra's launchers do: from the overrides that are not swept."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    register()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=fixed, return_hydra_config=True)
    return Path(OmegaConf.select(cfg, "hydra.sweep.dir"))


def run_train(args: list[str], debug: bool = False, trust: Sequence[str] | None = None) -> None:
    """``posx train ARGS``: checks the overrides, then runs Hydra with ARGS.

    ``trust`` is for ARGS that come from a run directory (``posx resume``) rather than the
    user's command line: only posx's and trusted ``_target_`` classes are then built.

    Raises:
        ConfigError: A bad override or Hydra usage error (before any run starts).
        PosxError: A single run failed, or some runs of a sweep did (after all ran).
    """
    flags, overrides = split_args(args)
    multirun = bool({"-m", "--multirun"} & set(flags))
    if not NO_CHECK_FLAGS & set(flags):
        check_overrides(overrides, build="--cfg" not in flags and "-c" not in flags, trust=trust)
    w = init_process_group()
    if w.distributed and multirun:
        raise ConfigError("torchrun runs one training job; launch sweeps without torchrun")
    extra = []
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
        return _job(cfg, debug, trust)

    # @hydra.main reads its arguments from sys.argv: Hydra has no public call that takes a list.
    saved_argv = sys.argv
    sys.argv = ["posx train", *args, *extra]
    try:
        hydra_train()
    except ValueError as err:  # Hydra's own usage errors, e.g. -m together with --cfg
        raise ConfigError(one_line(err)) from err
    finally:
        sys.argv = saved_argv
    if multirun and not NO_CHECK_FLAGS & set(flags) and "--cfg" not in flags:
        _raise_if_jobs_failed(sweep_dir_of([*overrides, *extra]))


def _raise_if_jobs_failed(sweep_dir: Path) -> None:
    """Counts the sweep's failed jobs from their ``run.json`` files, which every launcher's
    workers write, so the exit code is right for joblib and submitit workers too."""
    if not (sweep_dir / "multirun.yaml").is_file():
        return
    failed = [j.run_dir.name for j in sweep_status(sweep_dir) if j.status == "failed" and j.run_dir]
    if failed:
        raise PosxError(f"{len(failed)} run(s) of the sweep failed: {', '.join(failed)}")


def run_resume(run_dir: Path, debug: bool = False, trust: Sequence[str] = ()) -> None:
    """``posx resume RUN``: trains RUN on from its checkpoint with its own overrides.

    The overrides come from the run directory, not from the user, so they are checked as
    untrusted input before Hydra starts: no Hydra settings or flags, only posx's and trusted
    ``_target_`` classes (``trust``), the composed config must match the checkpoint, and no file
    Hydra writes into RUN may be a symbolic link.

    Raises:
        ConfigError: Not a run, an unwritable run directory, a refused override or target.
        PosxError: Damaged run files, or a config that does not match the checkpoint.
    """
    overrides_file = run_dir / ".hydra" / "overrides.yaml"
    if not overrides_file.is_file():
        raise ConfigError(f"not a posx run directory (no .hydra/overrides.yaml): {run_dir}")
    overrides = run_overrides(overrides_file)
    verify_checkpoint(run_dir, resume=True)  # damage fails here, before run.json is touched
    info = run_info(run_dir) if (run_dir / "run.json").is_file() else {}
    cfg = compose(overrides)
    check_trusted(cfg, trust, str(overrides_file), recorded(info))
    check_identity(run_dir, cfg, f"{overrides_file} (composed with posx's configs)")
    refuse_links(run_dir)
    check_writable(run_dir, "run directory", "copy the run somewhere writable and resume the copy")
    run_train([*overrides, "train.resume=true", f"hydra.run.dir={run_dir}"], debug, trust)


def run_overrides(path: Path) -> list[str]:
    """The config overrides a run was trained with (``.hydra/overrides.yaml``), as untrusted
    input: a list of ``key=value`` strings that leave Hydra's own settings alone.

    Raises:
        PosxError: The file is not a YAML list of strings.
        ConfigError: An entry sets Hydra itself (callbacks, launchers and flags run code).
    """
    try:
        loaded = OmegaConf.load(path)
        if not isinstance(loaded, ListConfig) or not all(isinstance(o, str) for o in loaded):
            raise ValueError("a list of key=value overrides was expected")
    except (OSError, ValueError, yaml.YAMLError, OmegaConfBaseException) as err:
        raise PosxError(
            f"{path} is damaged ({one_line(err)}); restore it from a backup, or move the run aside"
        ) from err
    overrides = [str(o) for o in loaded if not str(o).startswith("train.resume=")]
    for o in overrides:
        if o.startswith("-") or o.split("=", 1)[0].lstrip("+~").startswith("hydra"):
            raise ConfigError(
                f"{path} has {o!r}: a run's overrides may set posx's config only, not Hydra's "
                "settings or flags (those can run code); remove that line to resume"
            )
    return overrides


def refuse_links(run_dir: Path) -> None:
    """Hydra writes ``.hydra/*.yaml`` and its log file into the run directory with plain
    ``open``, which follows a symbolic link: a shared run could aim them at any file."""
    for path in [run_dir / ".hydra", *run_dir.glob(".hydra/*"), *run_dir.glob("*.log")]:
        if path.is_symlink():
            raise ConfigError(
                f"{path} is a symbolic link, which resuming would write through; replace it "
                "with a regular file (or remove it) to resume"
            )
