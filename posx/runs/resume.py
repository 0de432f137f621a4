"""``posx resume RUN``: the run directory's files are untrusted input, checked before Hydra
starts; then training goes on from the checkpoint through :func:`posx.runs.launch.run_train`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posx.config.compose import compose
from posx.config.hints import one_line
from posx.config.paths import dirs_of_searchpath, user_config_dirs
from posx.config.saved import check_loadable
from posx.errors import ConfigError, PosxError
from posx.runs.evaluation import check_data
from posx.runs.launch import run_train
from posx.storage.checkpoint import verify_checkpoint
from posx.storage.results import check_writable, run_info


def finished(run_dir: Path) -> str | None:
    """Why there is nothing to resume (trained to its last step and evaluated), else None."""
    try:
        info = run_info(run_dir)
    except (PosxError, ValueError):  # no or damaged run.json: let training say what is wrong
        return None
    if info.get("status") != "trained" or not (run_dir / "eval.csv").is_file():
        return None
    return (
        f"{run_dir} already finished: trained {info.get('steps')} of {info.get('steps')} steps "
        f"and evaluated; nothing to resume (evaluate again with `posx eval {run_dir}`)"
    )


def run_resume(
    run_dir: Path,
    debug: bool = False,
    dirs: list[Path] | None = None,
    trust: Sequence[str] = (),
) -> None:
    """``posx resume RUN``: trains RUN on from its checkpoint with its own overrides, and the
    user config dirs it was trained with (``dirs``, default: from ``POSX_CONFIG_PATH``, come
    first, for a config dir that moved).

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
    # The run's files are checked before anything else, a finished run's too: they are
    # untrusted input whatever the run's state.
    refuse_links(run_dir)  # before reading its hydra.yaml, which could be a link
    current = user_config_dirs() if dirs is None else dirs
    # The config dirs it was trained with (its hydra.yaml), after the user's own: a dir that
    # moved is found among the user's. They only supply configs: every `_target_` they name
    # is still checked, and only the user's own dirs grant trust (see posx.config.trust).
    known = [d for d in dirs_of_searchpath(recorded_searchpath(run_dir)) if d.is_dir()]
    dirs = user_config_dirs([*current, *known], env=False)
    info = run_info(run_dir) if (run_dir / "run.json").is_file() else {}
    cfg = compose(overrides, dirs)
    check_loadable(run_dir, cfg, overrides_file, trust, info, composed=True)
    check_writable(run_dir, "run directory", "copy the run somewhere writable and resume the copy")
    done = finished(run_dir)
    if done:
        print(done, flush=True)
        return
    # Training goes on (or its evaluation does) on the corpus it started with, or not at all.
    check_data(run_dir, [], trust)
    run_train([*overrides, "train.resume=true", f"hydra.run.dir={run_dir}"], debug, dirs, trust)


def recorded_searchpath(run_dir: Path) -> list[Any]:
    """The ``hydra.searchpath`` a run was trained with (its ``.hydra/hydra.yaml``), or ``[]``.

    Raises:
        PosxError: The file is damaged.
    """
    path = run_dir / ".hydra" / "hydra.yaml"
    if not path.is_file():
        return []
    value = _load_run_yaml(path, "hydra.searchpath") or []
    if not isinstance(value, ListConfig | list):
        raise _damaged(path, "hydra.searchpath is not a list")
    return list(value)


def run_overrides(path: Path) -> list[str]:
    """The config overrides a run was trained with (``.hydra/overrides.yaml``), as untrusted
    input: a list of ``key=value`` strings that leave Hydra's own settings alone.

    Raises:
        PosxError: The file is not a YAML list of strings.
        ConfigError: An entry sets Hydra itself (callbacks, launchers and flags run code).
    """
    loaded = _load_run_yaml(path)
    if not isinstance(loaded, ListConfig) or not all(isinstance(o, str) for o in loaded):
        raise _damaged(path, "a list of key=value overrides was expected")
    # posx's own entries: resume sets train.resume itself, and the config dirs come from
    # hydra.yaml (see run_resume); every other Hydra setting is refused below.
    own = ("train.resume=", "hydra.searchpath=")
    overrides = [str(o) for o in loaded if not str(o).startswith(own)]
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


def _load_run_yaml(path: Path, key: str | None = None) -> Any:
    """A YAML file of a run (untrusted input), or its ``key``; :class:`PosxError` naming the
    file as damaged when it cannot be read."""
    try:
        loaded = OmegaConf.load(path)
        return loaded if key is None else OmegaConf.select(loaded, key)
    except (OSError, ValueError, yaml.YAMLError, OmegaConfBaseException) as err:
        raise _damaged(path, one_line(err)) from err


def _damaged(path: Path, why: str) -> PosxError:
    return PosxError(f"{path} is damaged ({why}); restore it from a backup, or move the run aside")
