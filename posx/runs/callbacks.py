"""posx's Hydra callbacks (``hydra.callbacks`` in configs/hydra/default.yaml).

:class:`SweepDirectory` names the directory a sweep writes into as Hydra starts it: Hydra has
composed the sweep's config by then, so posx need not compose it once more only to learn where
the sweep goes (a compose costs 60-140 ms, and every launch of ``posx extend`` is a sweep).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

# every sweep this process started, in order (read by posx.runs.launch after Hydra returns)
_STARTED: list[Path] = []


class SweepDirectory(Callback):
    """Prints ``sweep directory: DIR`` before the first job of a sweep starts, and records DIR
    for :func:`sweeps_started`."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        path = Path(str(config.hydra.sweep.dir))
        _STARTED.append(path)
        print(f"sweep directory: {path}", flush=True)


def sweeps_started() -> int:
    """How many sweeps this process has started: a mark for :func:`sweep_started_since`."""
    return len(_STARTED)


def sweep_started_since(mark: int) -> Path | None:
    """The directory of the last sweep started after ``mark``, or None."""
    return _STARTED[-1] if len(_STARTED) > mark else None
