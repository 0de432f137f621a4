"""A saved run: one run directory, opened once, each of its files read once.

A run directory is untrusted input (people share sweeps and paper artifacts), and every command
that takes one asks it the same things: is it a run, what did it record, is its checkpoint
whole, may its config be built, is its data still what it trained on. :class:`SavedRun` is where
those answers live. ``posx eval``, ``resume``, ``extend``, ``runs``, ``report``, ``check``, the
trackers and :mod:`posx.api` open a path into a ``SavedRun`` once and hand the object on; no
other module reads ``run.json``, ``.hydra/*.yaml`` or the checkpoint's headers of a saved run.

Each file is read when it is first asked for and kept (:class:`RunRecords`): a damaged file is
refused in one line naming it, with the same message whichever command asks, and every time it
is asked. A run being written (training, or an evaluation merging rows) keeps its recorded
files unchanged, so what was read stays true while the object lives.

What the run is (:class:`RunKind`) comes from ``run.json``: trained from scratch, an extension
of another run (``parent``), a pretrained model's record (``posx eval hf:``), or a pretrained
model's extension.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from posx.config.build import build_task
from posx.config.compose import compose
from posx.config.saved import (
    apply_overrides,
    data_change_error,
    override_keys,
    recorded_eval_precision,
    with_eval_defaults,
)
from posx.config.trust import check_trusted, is_recorded, recorded
from posx.config.validate import validate
from posx.errors import ConfigError, PosxError
from posx.saved.records import CONFIG, OVERRIDES, RunRecords
from posx.storage.checkpoint import check_identity

__all__ = ["RunKind", "SavedRun"]


class RunKind(StrEnum):
    """What made a run directory (``run.json`` says)."""

    TRAINED = "trained"  # posx train, from scratch
    EXTENSION = "extension"  # posx extend of a posx run: run.json has `parent`
    PRETRAINED = "pretrained"  # posx eval hf:: a pretrained model's rows, never trained here
    PRETRAINED_EXTENSION = "pretrained extension"  # a pretrained model fine-tuned longer


class SavedRun(RunRecords):
    """One run directory, opened once: what it records (:class:`RunRecords`) and the answers
    to what the commands ask of it (see the module docstring).

    Args:
        path: The run directory, as the user spelled it (messages show it so).
    """

    @classmethod
    def of(cls, run: SavedRun | Path | str) -> SavedRun:
        """``run`` itself when it is already open, else the run at that path."""
        return run if isinstance(run, SavedRun) else cls(run)

    @property
    def kind(self) -> RunKind:
        pretrained = self.status == "pretrained" or "pretrained" in self.recorded
        if pretrained:
            return RunKind.PRETRAINED_EXTENSION if self.parent else RunKind.PRETRAINED
        return RunKind.EXTENSION if self.parent else RunKind.TRAINED

    def check_loadable(
        self,
        cfg: DictConfig,
        source: Path | str,
        trust: Sequence[str],
        info: dict[str, Any],
        composed: bool = False,
    ) -> None:
        """Refuses a config of the run that is not safe or not right to build: what ``posx
        eval`` (the saved config), ``resume`` and ``extend`` (its overrides, composed) check
        first.

        Args:
            cfg: The config read from the run (saved, or composed from its overrides).
            source: The run's file it came from, for the messages.
            trust: Trusted ``_target_`` prefixes (see :mod:`posx.config.trust`).
            info: The run's ``run.json`` (``{}`` when it has none): its ``needs_trust`` words
                the trust message.
            composed: ``cfg`` was composed from ``source`` with posx's configs.

        Raises:
            ConfigError: A target that is not trusted.
            PosxError: A config that does not match the checkpoint.
        """
        # A run.json without needs_trust (trained before posx recorded it) proves nothing.
        unrecorded = bool(info) and not is_recorded(info)
        check_trusted(cfg, trust, str(source), recorded(info), unrecorded)
        where = f"{source} (composed with posx's configs)" if composed else str(source)
        check_identity(self.path, cfg, where, self.trainer_state)

    def loadable_config(self, overrides: Sequence[str], trust: Sequence[str] = ()) -> DictConfig:
        """The run's config with eval-time ``overrides``, once it is safe and right to build.

        The saved config must be what the checkpoint was trained with (an edited config would
        label these weights as another encoding's), and every ``_target_`` in it must be posx's
        own or trusted (``trust``): a run directory cannot run code.

        Raises:
            ConfigError: A bad override, or a target that is not trusted.
            PosxError: A damaged config, or one that does not match the checkpoint.
        """
        key = ("_loadable", tuple(overrides), tuple(trust))
        if key not in self.__dict__:
            saved = self.config
            info = self.info
            self.check_loadable(saved, self.path / CONFIG, trust, info)
            cfg = apply_overrides(with_eval_defaults(saved), list(overrides))
            check_trusted(cfg, trust, "eval-time overrides", None)  # what they add is the user's
            validate(cfg)
            self.__dict__[key] = recorded_eval_precision(cfg, info, overrides)
        return copy.deepcopy(self.__dict__[key])  # the caller may edit its copy

    def composed_config(self, dirs: Sequence[Path], trust: Sequence[str]) -> DictConfig:
        """The run's overrides composed with posx's configs and ``dirs`` (:meth:`config_dirs`),
        once every target is trusted and the result matches the checkpoint: what training on
        from this run (``resume``, ``extend``) builds.

        Raises:
            ConfigError: A refused override or target.
            PosxError: Damaged files, or a config that does not match the checkpoint.
        """
        info = self.info_if_any
        cfg = compose(self.overrides, list(dirs))
        self.check_loadable(cfg, self.path / OVERRIDES, trust, info, composed=True)
        return cfg

    def check_same_data(self, overrides: Sequence[str] = (), trust: Sequence[str] = ()) -> None:
        """Refuses a run whose corpus or tokenizer is no longer what its training recorded: a
        corpus file edited, ``stdlib`` of another Python, a dataset or tokenizer file that
        changed. Its rows would be numbers on other text under the run's name.

        With a ``task.*`` eval-time override the data is the user's choice (recorded in each
        row), so nothing is checked; a synthetic task's data is its config.

        Raises:
            PosxError: One line naming the corpus, what changed and what to do.
        """
        if any(k == "task" or k.startswith("task.") for k in override_keys(overrides)):
            return
        if not self.data:
            return  # a synthetic task (its data is its config), or a run that recorded none
        key = ("_same_data", tuple(overrides), tuple(trust))
        if key in self.__dict__:
            return
        cfg = self.loadable_config(overrides, trust)
        # built as evaluation builds it (the corpus is read once: load_corpus caches its bytes)
        described = build_task(cfg, self.results_root).describe()
        problem = data_change_error(self.path, self.info.get("task_info"), described)
        if problem is not None:
            raise problem
        self.__dict__[key] = True

    def finished(self) -> str | None:
        """Why there is nothing to resume (trained to its last step and evaluated), else None."""
        try:
            info = self.info
        except (PosxError, ValueError):  # no or damaged run.json: let training say what is wrong
            return None
        if info.get("status") != "trained" or not (self.path / "eval.csv").is_file():
            return None
        return (
            f"{self.path} already finished: trained {info.get('steps')} of {info.get('steps')} "
            f"steps and evaluated; nothing to resume (evaluate again with `posx eval "
            f"{self.path}`)"
        )

    def refuse_links(self) -> None:
        """Hydra writes ``.hydra/*.yaml`` and its log file into the run directory with plain
        ``open``, which follows a symbolic link: a shared run could aim them at any file.

        Raises:
            ConfigError: One of them is a link, naming it.
        """
        run = self.path
        for path in [run / ".hydra", *run.glob(".hydra/*"), *run.glob("*.log")]:
            if path.is_symlink():
                raise ConfigError(
                    f"{path} is a symbolic link, which resuming would write through; replace it "
                    "with a regular file (or remove it) to resume"
                )
