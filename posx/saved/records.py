"""What a run directory records, read once: ``run.json``, the saved and recorded configs,
Hydra's record of the command line, the checkpoint's state, shapes and weights, and its lineage.
:class:`~posx.saved.run.SavedRun` adds what kind of run it is and what the commands ask.

Each file is read when it is first asked for and kept. A damaged file is refused in one line
naming it, with the same words whichever reader asks and every time it asks (the file is not
read again to say it).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from posx.config.fingerprint import config_fingerprint, data_identity, with_records
from posx.config.paths import dirs_of_searchpath, user_config_dirs
from posx.config.saved import typed_config
from posx.errors import ConfigError, PosxError, one_line
from posx.saved.hydra_record import read_overrides, read_searchpath
from posx.storage.checkpoint import (
    checkpoint_dir,
    checkpoint_state,
    load_trainer_tensors,
    load_weights,
    parameter_shapes,
    read_weights,
    verify_headers,
)
from posx.storage.results import check_run_info, read_run_info, results_root

if TYPE_CHECKING:
    import torch

INFO = "run.json"
CONFIG = ".hydra/config.yaml"
OVERRIDES = ".hydra/overrides.yaml"
HYDRA = ".hydra/hydra.yaml"


class RunRecords:
    """What one run directory records, each file read when first asked for and kept.

    Args:
        path: The run directory, as the user spelled it (messages show it so).
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"

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
        return None if isinstance(read, dict) else one_line(read)

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
            return err

    def _loaded_config(self) -> Any:
        read = self._config_read
        if isinstance(read, BaseException):
            raise read
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
        saved = self._raw_config
        base = saved if saved is not None else cfg
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
        untrusted input (:func:`~posx.saved.hydra_record.read_overrides`).

        Raises:
            ConfigError: No such file, or an entry that sets Hydra itself.
            PosxError: The file is not a YAML list of strings.
        """
        self.require_overrides()
        return read_overrides(self.path / OVERRIDES)

    def require_overrides(self) -> None:
        """Refuses a directory without Hydra's record of the command line (``posx resume`` and
        ``posx extend`` train on from it).

        Raises:
            ConfigError: No such directory, or no ``.hydra/overrides.yaml``.
        """
        if not self.path.exists():
            raise ConfigError(f"run directory does not exist: {self.path}")
        if not (self.path / OVERRIDES).is_file():
            raise ConfigError(f"not a posx run directory (no .hydra/overrides.yaml): {self.path}")

    @cached_property
    def searchpath(self) -> list[Any]:
        """The ``hydra.searchpath`` the run was trained with (``.hydra/hydra.yaml``), or ``[]``.

        Raises:
            PosxError: The file is damaged.
        """
        return read_searchpath(self.path / HYDRA)

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
    def steps_done(self) -> int | None:
        """The step its checkpoint holds (an interrupted run's is short of ``run.json``'s
        ``steps``); None without a readable checkpoint."""
        try:
            return int(self.trainer_state["step"])
        except (PosxError, KeyError, TypeError, ValueError):
            return None

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
