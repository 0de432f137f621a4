"""A saved run: one run directory, opened once, each of its files read once.

A run directory is untrusted input (people share sweeps and paper artifacts), and every command
that takes one asks it the same things: is it a run, what did it record, is its checkpoint
whole, may its config be built, is its data still what it trained on. :class:`SavedRun` is where
those answers live. ``posx eval``, ``resume``, ``extend``, ``runs``, ``report``, ``check``, the
trackers and :mod:`posx.api` open a path into a ``SavedRun`` once and hand the object on; no
other module reads ``run.json``, ``.hydra/*.yaml`` or the checkpoint's headers of a saved run.

Each file is read when it is first asked for and kept: a damaged file is refused in one line
naming it, with the same message whichever command asks (a refusal is not kept, so asking again
says it again). A run being written (training, or an evaluation merging rows) keeps its recorded
files unchanged, so what was read stays true while the object lives.

What the run is (:class:`RunKind`) comes from ``run.json``: trained from scratch, an extension
of another run (``parent``), a pretrained model's record (``posx eval hf:``), or a pretrained
model's extension.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posx.config.build import build_task
from posx.config.compose import compose
from posx.config.fingerprint import config_fingerprint, data_identity, with_records
from posx.config.paths import dirs_of_searchpath, user_config_dirs
from posx.config.saved import (
    apply_overrides,
    data_change_error,
    override_keys,
    recorded_eval_precision,
    typed_config,
    with_eval_defaults,
)
from posx.config.trust import check_trusted, is_recorded, recorded
from posx.config.validate import validate
from posx.errors import ConfigError, PosxError, one_line
from posx.storage.checkpoint import (
    check_identity,
    checkpoint_dir,
    checkpoint_state,
    load_trainer_tensors,
    load_weights,
    parameter_shapes,
    read_weights,
    verify_headers,
)
from posx.storage.results import check_run_info, read_run_info, results_root

INFO = "run.json"
CONFIG = ".hydra/config.yaml"
OVERRIDES = ".hydra/overrides.yaml"
HYDRA = ".hydra/hydra.yaml"


class RunKind(StrEnum):
    """What made a run directory (``run.json`` says)."""

    TRAINED = "trained"  # posx train, from scratch
    EXTENSION = "extension"  # posx extend of a posx run: run.json has `parent`
    PRETRAINED = "pretrained"  # posx eval hf:: a pretrained model's rows, never trained here
    PRETRAINED_EXTENSION = "pretrained extension"  # a pretrained model fine-tuned longer


class SavedRun:
    """One run directory, read once (see the module docstring).

    Args:
        path: The run directory, as the user spelled it (messages show it so).
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    @classmethod
    def of(cls, run: SavedRun | Path | str) -> SavedRun:
        """``run`` itself when it is already open, else the run at that path."""
        return run if isinstance(run, SavedRun) else cls(run)

    def __repr__(self) -> str:
        return f"SavedRun({str(self.path)!r})"

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def results_root(self) -> Path:
        """The results root above the run (where the eval cache lives)."""
        return results_root(self.path)

    def is_run(self) -> bool:
        """A run directory: ``run.json`` (every run since it was recorded) or a saved Hydra
        config (a run killed before it wrote ``run.json``)."""
        return (self.path / INFO).is_file() or (self.path / CONFIG).is_file()

    # -- what the directory records -----------------------------------------------------------

    @cached_property
    def _info_read(self) -> dict[str, Any] | BaseException:
        return read_run_info(self.path)

    @property
    def info(self) -> dict[str, Any]:
        """``run.json``.

        Raises:
            ConfigError: The run has none.
            PosxError: It is damaged, or was written by a newer posx.
        """
        return check_run_info(self.path, self._info_read)

    @property
    def info_if_any(self) -> dict[str, Any]:
        """``run.json``, or ``{}`` for a run that has none (one killed before writing it); a
        damaged one is still refused."""
        return self.info if (self.path / INFO).is_file() else {}

    @property
    def recorded(self) -> dict[str, Any]:
        """``run.json`` as far as it can be read: ``{}`` when it is missing or damaged (a report
        reads what it can; the commands that load a run refuse a damaged one first)."""
        read = self._info_read
        return read if isinstance(read, dict) else {}

    @property
    def info_error(self) -> str | None:
        """Why ``run.json`` cannot be read (missing, not JSON, not an object), else None."""
        read = self._info_read
        if isinstance(read, dict):
            return None
        return (str(read).strip().splitlines() or [type(read).__name__])[0]

    @cached_property
    def config(self) -> DictConfig:
        """The config Hydra saved for the run, typed by posx's schema.

        Raises:
            ConfigError: No run directory, or no saved config.
            PosxError: The saved config is damaged or does not fit the schema.
        """
        if not self.path.is_dir():
            raise ConfigError(f"run directory does not exist: {self.path}")
        return typed_config(self.path / CONFIG, self.path, lambda _: self._loaded_config())

    @cached_property
    def _config_read(self) -> Any:
        """``.hydra/config.yaml`` parsed once: what it holds, or the error that parsing raised
        (each reader words it as it always has); None when there is no file."""
        path = self.path / CONFIG
        if not path.is_file():
            return None
        try:
            return OmegaConf.load(path)
        except Exception as err:  # noqa: BLE001 - kept, and raised to each reader
            return _Failed(err)

    def _loaded_config(self) -> Any:
        read = self._config_read
        if isinstance(read, _Failed):
            raise read.error
        return copy.deepcopy(read)  # each reader may change its own

    @property
    def _raw_config(self) -> DictConfig | None:
        if self._config_read is None:
            return None
        cfg = self._loaded_config()
        return cfg if isinstance(cfg, DictConfig) else None

    @cached_property
    def recorded_config(self) -> DictConfig | None:
        """The config the run ran with, as its files record it: the saved config (untyped)
        with what ``run.json`` records (:func:`~posx.config.fingerprint.with_records`); None
        when there is no saved config."""
        cfg = self._raw_config
        return with_records(cfg, self.recorded) if cfg is not None else None

    def fingerprint_with(
        self, cfg: DictConfig | None = None, info: dict[str, Any] | None = None
    ) -> str:
        """The run's fingerprint, from its saved config (the source every reader shares), else
        from ``cfg``; ``""`` when neither exists.

        Args:
            cfg: The config, when the run has no saved one (yet).
            info: What ``run.json`` records; default: read from the run (training passes what
                it is about to write).
        """
        base = self._raw_config if self._raw_config is not None else cfg
        if base is None:
            return ""
        return config_fingerprint(with_records(base, self.recorded if info is None else info))

    @cached_property
    def fingerprint(self) -> str:
        """The run's fingerprint, as ``posx report`` computes it from its files."""
        return self.fingerprint_with()

    @cached_property
    def overrides(self) -> list[str]:
        """The config overrides the run was trained with (``.hydra/overrides.yaml``), as
        untrusted input: a list of ``key=value`` strings that leave Hydra's own settings alone.

        Raises:
            ConfigError: No such file, or an entry that sets Hydra itself (callbacks, launchers
                and flags run code).
            PosxError: The file is not a YAML list of strings.
        """
        self.require_overrides()
        path = self.path / OVERRIDES
        loaded = _load_run_yaml(path)
        if not isinstance(loaded, ListConfig) or not all(isinstance(o, str) for o in loaded):
            raise _damaged(path, "a list of key=value overrides was expected")
        # posx's own entries: resume sets train.resume itself, and the config dirs come from
        # hydra.yaml (see config_dirs); every other Hydra setting is refused below.
        own = ("train.resume=", "hydra.searchpath=")
        overrides = [str(o) for o in loaded if not str(o).startswith(own)]
        for o in overrides:
            if o.startswith("-") or o.split("=", 1)[0].lstrip("+~").startswith("hydra"):
                raise ConfigError(
                    f"{path} has {o!r}: a run's overrides may set posx's config only, not "
                    "Hydra's settings or flags (those can run code); remove that line to resume"
                )
        return overrides

    def require_overrides(self) -> None:
        """Refuses a directory without Hydra's record of the command line (``posx resume`` and
        ``posx extend`` train on from it).

        Raises:
            ConfigError: No ``.hydra/overrides.yaml``.
        """
        if not (self.path / OVERRIDES).is_file():
            raise ConfigError(f"not a posx run directory (no .hydra/overrides.yaml): {self.path}")

    @cached_property
    def searchpath(self) -> list[Any]:
        """The ``hydra.searchpath`` the run was trained with (``.hydra/hydra.yaml``), or ``[]``.

        Raises:
            PosxError: The file is damaged.
        """
        path = self.path / HYDRA
        if not path.is_file():
            return []
        value = _load_run_yaml(path, "hydra.searchpath") or []
        if not isinstance(value, ListConfig | list):
            raise _damaged(path, "hydra.searchpath is not a list")
        return list(value)

    def config_dirs(self, current: Sequence[Path]) -> list[Path]:
        """The config dirs to compose the run's overrides with: the user's (``current``) first,
        then those it was trained with that still exist (a dir that moved is found among the
        user's). They only supply configs: every ``_target_`` they name is still checked, and
        only the user's own dirs grant trust (see :mod:`posx.config.trust`)."""
        known = [d for d in dirs_of_searchpath(self.searchpath) if d.is_dir()]
        return user_config_dirs([*current, *known], env=False)

    def has_checkpoint(self) -> bool:
        """Whether the run has a complete checkpoint directory (not whether it is whole)."""
        try:
            checkpoint_dir(self.path)
        except PosxError:
            return False
        return True

    def verify_checkpoint(self, resume: bool = False) -> None:
        """Refuses a checkpoint whose ``trainer.json`` or the safetensors headers evaluation
        (``resume``: also resuming) reads are damaged: cheap, so a command can refuse a damaged
        run before any work.

        Raises:
            PosxError: No checkpoint, or a damaged file (naming it).
        """
        key = f"_verified_{resume}"
        if key not in self.__dict__:
            self.trainer_state  # noqa: B018 - trainer.json first, as always
            self.__dict__["shapes"] = verify_headers(self.path, resume=resume)
            self.__dict__[key] = True

    @cached_property
    def trainer_state(self) -> dict[str, Any]:
        """The checkpoint's ``trainer.json`` (its ``step``, ``tokens``, ``identity``)."""
        return checkpoint_state(self.path)

    @cached_property
    def shapes(self) -> dict[str, list[int]]:
        """Every weight's shape in the checkpoint, from the safetensors header only."""
        return parameter_shapes(self.path)

    def load_into(self, model: torch.nn.Module) -> None:
        """Loads the checkpoint's weights into ``model`` (built from the run's config).

        Raises:
            PosxError: A damaged file, or weights that do not fit ``model``.
        """
        load_weights(self.path, model, self.shapes)

    def weights(self) -> tuple[dict[str, torch.Tensor], str]:
        """The checkpoint's weights and the SHA-256 of the bytes they were read from (not kept:
        they can be large)."""
        return read_weights(self.path)

    def trainer_tensors(self) -> dict[str, torch.Tensor]:
        """The extra tensors saved with the checkpoint (RNG states); empty when there are none."""
        return load_trainer_tensors(self.path)

    @property
    def data(self) -> dict[str, Any]:
        """What identifies the data the run trained on (``run.json``'s ``task_info``)."""
        return data_identity(self.info.get("task_info"))

    @property
    def status(self) -> str | None:
        return self.recorded.get("status")

    @property
    def parent(self) -> dict[str, Any] | None:
        """An extension's lineage (``run.json``'s ``parent``), else None."""
        parent = self.recorded.get("parent")
        return parent if isinstance(parent, dict) and parent else None

    @property
    def kind(self) -> RunKind:
        pretrained = self.status == "pretrained" or "pretrained" in self.recorded
        if pretrained:
            return RunKind.PRETRAINED_EXTENSION if self.parent else RunKind.PRETRAINED
        return RunKind.EXTENSION if self.parent else RunKind.TRAINED

    @property
    def experiment(self) -> str:
        """The preset the run records (``run.json``'s ``experiment``, else its saved config's
        ``experiment_name``); ``""`` when neither names one."""
        try:
            name = str(self.info.get("experiment") or "")
        except PosxError:
            name = ""
        if not name:
            try:
                cfg = self.recorded_config
            except Exception:  # noqa: BLE001 - a damaged config only means "no preset recorded"
                cfg = None
            name = str(cfg.get("experiment_name") or "") if cfg is not None else ""
        return name

    # -- what the commands ask ----------------------------------------------------------------

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


class _Failed:
    """A file that could not be parsed: its error, raised again to each reader."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


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
