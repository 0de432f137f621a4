"""The Hydra entry point behind ``posx train``, and the checks run before Hydra starts.

``posx train ARGS`` hands ARGS to a real ``@hydra.main`` function, so multirun (``-m``),
``--cfg job``, launchers and sweepers behave exactly as Hydra documents them. Before that, every
override is composed once (each sweep value at least once) so that a typo or an impossible
setting fails in one line with exit code 2 instead of half-way through a sweep.
"""

from __future__ import annotations

import difflib
import itertools
import json
import os
import re
import sys
import traceback
from pathlib import Path

import hydra
import torch
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, OverrideParseException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posx.checkpoint import checkpoint_dir
from posx.config import CONFIG_DIR, GROUPS, choices, new_run_id, register, validate
from posx.distributed import init_process_group, share_run_id, world
from posx.errors import ConfigError, Interrupted, PosxError
from posx.results import check_writable, write_json

register()

# Hydra flags that take a value; ``-m``/``--multirun`` and friends take none.
_VALUE_FLAGS = {
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
    "--info",
    "-i",
    "--experimental-rerun",
    "--shell-completion",
    "-sc",
}
_NO_CHECK_FLAGS = {
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
FAILED: list[str] = []  # runs of this process's sweep that failed (for the exit code)


def debug_enabled() -> bool:
    return os.environ.get("POSX_DEBUG", "") not in ("", "0")


def one_line(err: BaseException) -> str:
    """The first line of an error and of its root cause, joined."""
    parts = []
    while err is not None:
        text = str(err).strip().splitlines()[0].rstrip(".") if str(err).strip() else ""
        if text and not any(text in p for p in parts):  # a cause the message already quotes
            parts.append(text)
        err = err.__cause__  # type: ignore[assignment]
    return ": ".join(parts[:1] + parts[-1:]) if len(parts) > 1 else (parts[0] if parts else "error")


def split_args(args: list[str]) -> tuple[list[str], list[str]]:
    """Separates Hydra's own flags from config overrides."""
    flags, overrides, take_value = [], [], False
    for arg in args:
        if take_value:
            flags.append(arg)
            take_value = False
        elif arg.startswith("-"):
            flags.append(arg)
            take_value = arg in _VALUE_FLAGS and arg not in ("--info", "-i")
        else:
            overrides.append(arg)
    return flags, overrides


def compose_config(overrides: list[str]) -> DictConfig:
    """The config ``posx train OVERRIDES`` would run with; bad overrides raise ConfigError."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        try:
            return compose(config_name="config", overrides=overrides)
        except (HydraException, OmegaConfBaseException, ValueError) as err:
            raise ConfigError(one_line(err) + _known_keys(err, overrides)) from err


def _known_keys(err: BaseException, overrides: list[str]) -> str:
    """For an override of a key that does not exist: the closest key and the keys there are
    (from the config composed without that override); empty for other errors."""
    found = re.search(r"Could not override '([^']+)'", str(err))
    if not found:
        return ""
    key = found[1]
    rest = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != key]
    try:
        return key_hint(compose(config_name="config", overrides=rest), key)
    except (HydraException, OmegaConfBaseException, ValueError):
        return ""


def key_hint(cfg: DictConfig, key: str) -> str:
    """``; did you mean 'model.d_model'? model keys: ...`` for a ``key`` missing from ``cfg``."""
    parent, _, leaf = key.lstrip("+~").rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    if not isinstance(node, DictConfig):
        return ""
    keys = [str(k) for k in node if not str(k).startswith("_")]
    close = difflib.get_close_matches(leaf, keys, n=1)
    hint = f"; did you mean '{parent + '.' if parent else ''}{close[0]}'?" if close else ";"
    return f"{hint} {parent or 'top-level'} keys: {', '.join(keys) or '(none)'}"


def _check_group_value(group: str, value: str) -> None:
    if group in GROUPS and value not in ("null", "None") and value not in choices(group):
        raise ConfigError(f"unknown {group} '{value}'; choose from: {', '.join(choices(group))}")


def check_overrides(overrides: list[str], build: bool = True) -> None:
    """Composes, validates and (with ``build``) instantiates every value of every override."""
    from posx.build import build_model, build_positions, build_task

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except OverrideParseException as err:
        raise ConfigError(f"bad override: {one_line(err)}") from err
    options: list[list[str]] = []
    for o in parsed:
        key = o.get_key_element()
        if key.lstrip("+~").startswith("hydra"):
            continue
        try:
            values = (
                list(o.sweep_string_iterator())
                if o.is_sweep_override()
                else [o.get_value_element_as_str()]
            )
        except HydraException:  # glob() and other sweeps Hydra expands itself
            continue
        for v in values:
            _check_group_value(o.key_or_group, v)
        options.append([f"{key}={v}" for v in values])
    # Each value of each sweep at least once, the other overrides at their first value.
    combos = {tuple(o[0] for o in options)}
    for i, opts in enumerate(options):
        for v in opts[1:]:
            combos.add(tuple(v if j == i else o[0] for j, o in enumerate(options)))
    for combo in itertools.islice(sorted(combos), 64):
        cfg = compose_config(list(combo))
        validate(cfg)
        if build:
            check_writable(Path(cfg.root))
            task = build_task(cfg)
            model = build_model(cfg, task.vocab_size)
            build_positions(cfg).check(model.encoding, cfg.train.length)
            # one tiny batch: a length too short for the task fails here, before any run dir exists
            task.train_batch(1, cfg.train.length, torch.Generator().manual_seed(0))


def _names() -> dict[str, str]:
    chosen = HydraConfig.get().runtime.choices
    return {g: str(chosen.get(g) or "custom") for g in ("encoding", "task", "model", "positions")}


@hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")
def hydra_train(cfg: DictConfig) -> float | None:
    """One training run inside Hydra; in a sweep a failure is recorded and the sweep goes on."""
    from posx.train import train

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    try:
        validate(cfg)
        return train(cfg, run_dir, _names())["final_loss"]
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
        if debug_enabled():
            traceback.print_exc()
        if hc.mode == RunMode.MULTIRUN:
            print(f"posx: run {run_dir.name} failed: {message}", file=sys.stderr)
            FAILED.append(run_dir.name)
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


def run_train(args: list[str]) -> None:
    """``posx train ARGS``: checks the overrides, then runs Hydra with ARGS."""
    flags, overrides = split_args(args)
    if not _NO_CHECK_FLAGS & set(flags):
        check_overrides(overrides, build="--cfg" not in flags and "-c" not in flags)
    FAILED.clear()
    new_run_id()
    w = init_process_group()
    if w.distributed:
        if {"-m", "--multirun"} & set(flags):
            raise ConfigError("torchrun runs one training job; launch sweeps without torchrun")
        share_run_id()  # every rank resolves rank 0's run directory
        if not w.is_main:  # only rank 0 writes Hydra's files and logs
            args = [
                *args,
                "hydra.output_subdir=null",
                "hydra/job_logging=disabled",
                "hydra/hydra_logging=disabled",
            ]
    sys.argv = ["posx train", *args]
    try:
        hydra_train()
    except ValueError as err:  # Hydra's own usage errors, e.g. -m together with --cfg
        raise ConfigError(one_line(err)) from err
    if FAILED:
        raise PosxError(f"{len(FAILED)} run(s) of the sweep failed: {', '.join(FAILED)}")


def run_resume(run_dir: Path) -> None:
    """``posx resume RUN``: trains RUN on from its checkpoint with its own overrides."""
    from omegaconf import OmegaConf

    from posx.checkpoint import verify_checkpoint

    overrides_file = run_dir / ".hydra" / "overrides.yaml"
    if not overrides_file.is_file():
        raise ConfigError(f"not a posx run directory (no .hydra/overrides.yaml): {run_dir}")
    verify_checkpoint(run_dir, resume=True)  # damage fails here, before run.json is touched
    overrides = [str(o) for o in OmegaConf.load(overrides_file)]
    overrides = [o for o in overrides if not o.startswith(("train.resume=", "hydra."))]
    run_train([*overrides, "train.resume=true", f"hydra.run.dir={run_dir}"])
