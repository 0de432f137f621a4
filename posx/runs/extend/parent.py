"""An extension's parent: the runs a path holds, each checked before any extension starts
(files, checkpoint, trust, not still training), and what the extension takes from it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from posx.errors import ConfigError, Interrupted, PosxError
from posx.saved import SavedRun
from posx.saved.process import training_process
from posx.storage.results import find_runs


def _quoted(value: str) -> str:
    """A Hydra override value as a quoted string (paths and labels may hold ``×``, ``@``)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def parents_of(path: Path) -> list[SavedRun]:
    """The runs ``posx extend PATH`` extends, opened: PATH itself when it is a run directory,
    else every run under it (a sweep or a results root) that was trained from scratch.

    Raises:
        ConfigError: PATH does not exist, or holds no run trained from scratch.
    """
    if not path.exists():
        raise ConfigError(f"run directory does not exist: {path}")
    if (path / ".hydra").is_dir() or (path / "run.json").is_file() or not path.is_dir():
        return [SavedRun(path)]
    if (path / "config.json").is_file():  # save_pretrained's directory, named without hf:
        raise ConfigError(
            f"{path} is a Hugging Face model directory (config.json), not a posx run: extend it "
            f"with posx extend hf:{path} extension=NAME"
        )
    found = []
    for run in map(SavedRun, find_runs(path)):
        try:
            info = run.info
        except PosxError:
            continue  # a damaged run is no base to extend; `posx runs` names it
        if info.get("status") == "trained" and not info.get("parent"):
            found.append(run)
    if not found:
        raise ConfigError(
            f"no trained run under {path} to extend (extensions are left out; name one "
            "directly to extend it again)"
        )
    return found


def _parent_config(run: SavedRun, dirs: list[Path], trust: Sequence[str]) -> tuple[list[str], Any]:
    """The parent's overrides and its config composed from them, once its files, checkpoint
    and config are checked as ``posx resume`` checks them (the config must match the
    checkpoint; every ``_target_`` posx's own or trusted)."""
    run.require_overrides()
    info = run.info
    if info.get("status") == "training":
        raise ConfigError(_still_training(run))
    if info.get("status") != "trained":
        raise ConfigError(
            f"{run.path} is {info.get('status') or 'not trained'}, not trained to its last step: "
            f"extend a finished run (finish this one with `posx resume {run.path}`)"
        )
    overrides = run.overrides
    cfg = run.composed_config(run.config_dirs(dirs), trust)
    run.check_same_data((), trust)  # it goes on reading the text its parent was trained on
    # the parent's own (fresh-run) bookkeeping is not the extension's
    own = ("invocation=", "train.resume=", "label=")  # label: the parent's, in parent_label
    return [o for o in overrides if not o.startswith(own)], cfg


def _still_training(run: SavedRun) -> str:
    """Why a run whose ``run.json`` says ``training`` is no parent yet: its process is still
    training it (wait, or stop it), or it stopped without a word (finish it first)."""
    who = training_process(run.info)
    if who is None:
        return (
            f"{run.path} stopped while training (its process is gone): finish it with "
            f"`posx resume {run.path}`, then extend it"
        )
    return (
        f"{run.path} is still training ({who}): wait for it to finish, or stop it first "
        "(Ctrl-C where it runs), then extend it"
    )


def check_parent(run: SavedRun | Path, dirs: list[Path], trust: Sequence[str]) -> dict[str, Any]:
    """Everything an extension needs from its parent, checked: its overrides, its composed
    config, and the ``extend.*`` settings that name it.

    Raises:
        ConfigError: A missing, damaged, unfinished or untrusted parent, in one line.
    """
    run = SavedRun.of(run)
    try:
        overrides, cfg = _parent_config(run, dirs, trust)
        state = run.trainer_state
        if int(state.get("step", -1)) != int(cfg.train.steps):
            raise PosxError(
                f"the checkpoint of {run.path} is at step {state.get('step')} of {cfg.train.steps}"
            )
        _, sha = run.weights()  # reads every byte: a corrupt file fails here
        info = run.info
    except Interrupted:
        raise
    except PosxError as err:
        # the user's input (the parent) is what is wrong: exit 2, as for any bad argument
        raise ConfigError(f"cannot extend {run.path}: {err}") from err
    base = OmegaConf.select(cfg, "extend.base_length") or cfg.train.length
    settings = {
        "extend.parent": _quoted(str(run.path.resolve())),
        "extend.parent_sha256": sha,
        "extend.parent_fingerprint": str(info.get("fingerprint") or run.fingerprint),
        "extend.parent_label": _quoted(str(info.get("encoding", ""))),
        "extend.parent_step": str(int(cfg.train.steps)),
        "extend.base_length": str(int(base)),
    }
    return {
        "run": run,
        "overrides": overrides,
        "cfg": cfg,
        "label": str(info.get("encoding") or run.name),
        "settings": [f"{k}={v}" for k, v in settings.items()],
    }
