"""``posx resume RUN``: the saved run's files are untrusted input, checked before Hydra starts
(:class:`~posx.saved.SavedRun` reads and refuses them); then training goes on from the
checkpoint through :func:`posx.runs.launch.run_train`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from posx.config.paths import user_config_dirs
from posx.errors import ConfigError
from posx.runs.launch import run_train
from posx.saved import SavedRun
from posx.saved.process import running_here
from posx.storage.results import check_writable


def run_resume(
    run: SavedRun | Path,
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
    run = SavedRun.of(run)
    pid = running_here(run.recorded)
    if pid is not None:
        raise ConfigError(
            f"{run.path} is still training (process {pid} on this machine): wait for it to "
            "finish, or stop it first; a second process would train the same run"
        )
    overrides = run.overrides
    run.verify_checkpoint(resume=True)  # damage fails here, before run.json is touched
    # The run's files are checked before anything else, a finished run's too: they are
    # untrusted input whatever the run's state.
    run.refuse_links()  # before reading its hydra.yaml, which could be a link
    dirs = run.config_dirs(user_config_dirs() if dirs is None else dirs)
    run.composed_config(dirs, trust)
    hint = "copy the run somewhere writable and resume the copy"
    check_writable(run.path, "run directory", hint)
    done = run.finished()
    if done:
        print(done, flush=True)
        return
    # Training goes on (or its evaluation does) on the corpus it started with, or not at all.
    run.check_same_data((), trust)
    run_train([*overrides, "train.resume=true", f"hydra.run.dir={run.path}"], debug, dirs, trust)
