"""A pretrained run's experiment trackers and its composed settings.

``posx eval hf:X logger=tensorboard`` selects trackers as ``posx train logger=...`` does (the
``logger`` config group, ``logger=[tensorboard,mlflow]``, ``logger.tensorboard.dir=DIR``); the
selection is kept in the run's ``run.json`` and the trackers' identities in its
``trackers.json``, so a later evaluation of the same model appends to the same tracker runs,
as ``posx eval`` of a trained run does. ``configs/pretrained.yaml`` is the config both this
module and the Hydra sweep (:mod:`posx.pretrained.sweep`) compose.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from posx.config.compose import register
from posx.config.fingerprint import flat_config
from posx.config.hints import override_error
from posx.config.paths import CONFIG_DIR, searchpath_override, user_config_dirs
from posx.errors import ConfigError
from posx.saved import SavedRun
from posx.tracking import LOGGERS, missing_package, selected, send_eval_rows
from posx.tracking.base import RunRef

CONFIG_NAME = "pretrained"


def compose_pretrained(
    overrides: Sequence[str], dirs: Sequence[Path] | None = None, hydra_node: bool = False
) -> DictConfig:
    """``configs/pretrained.yaml`` with ``overrides`` (and the user's config dirs).

    Raises:
        ConfigError: An override that does not apply, in posx's words.
    """
    register()
    full = [*overrides, *searchpath_override(user_config_dirs() if dirs is None else dirs)]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        try:
            return hydra_compose(
                config_name=CONFIG_NAME, overrides=full, return_hydra_config=hydra_node
            )
        except (HydraException, OmegaConfBaseException, ValueError) as err:
            raise override_error(err, full) from err


def is_logger_word(word: str) -> bool:
    """Whether a ``key=value`` word selects or sets a tracker (``logger=...``,
    ``logger.wandb.mode=offline``)."""
    key = word.partition("=")[0].lstrip("+~")
    return key == "logger" or key.startswith("logger.")


def chosen_loggers(words: Sequence[str], dirs: Sequence[Path] | None = None) -> dict[str, Any]:
    """The trackers ``logger=...`` words select, with their settings; ``{}`` without any.

    Raises:
        ConfigError: An unknown logger, or one whose package is not installed here (before
            any model is loaded).
    """
    if not words:
        return {}
    chosen = selected(compose_pretrained(list(words), dirs))
    for name in chosen:
        why = missing_package(name)
        if why:
            raise ConfigError(why)
    return chosen


def recorded_loggers(run: Path) -> dict[str, Any]:
    """The trackers an earlier evaluation of this model selected (its ``run.json``); ``{}`` for
    a new run, or a record that is not a mapping of known trackers (it is rewritten)."""
    found = SavedRun(run).recorded.get("logger")
    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in found.items() if k in LOGGERS and isinstance(v, dict)}


def send_rows(
    run: Path,
    info: dict[str, Any],
    rows: list[dict[str, Any]],
    chosen: dict[str, Any],
    sweep_dir: Path | None = None,
) -> list[str]:
    """Sends a pretrained run's new eval rows to its trackers.

    Args:
        run: The run directory (``trackers.json`` is kept there).
        info: Its ``run.json`` (the tracker run's config and tags).
        rows: The rows just written to ``eval.csv``.
        chosen: Tracker name -> settings.
        sweep_dir: The Hydra sweep the evaluation is a job of (groups its runs in each tool).

    Returns:
        Warnings: a tracker that is not installed here or failed (the rows are in eval.csv).
    """
    if not chosen:
        return []
    tags = {k: str(info[k]) for k in ("encoding", "task", "model", "seed", "train_length")}
    tags["fingerprint"] = str(rows[0]["fingerprint"]) if rows else ""
    tags["run_dir"] = str(run.resolve())
    ref = RunRef(
        run_dir=run,
        name=run.name,
        root=run.parent.parent,  # <root>/pretrained/<run>
        config=info,
        flat=flat_config(info),
        tags=tags,
        sweep_dir=sweep_dir,
    )
    return send_eval_rows(chosen, ref, rows)
