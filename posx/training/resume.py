"""Stopping cleanly and resuming exactly: the Ctrl-C handler that stops training at a step
boundary, the RNG state a checkpoint carries, and restoring a run from its checkpoint."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from posx.errors import PosxError
from posx.storage.checkpoint import load_checkpoint, load_trainer_tensors


class StopOnInterrupt:
    """The first Ctrl-C (or SIGTERM, which SLURM sends before it kills a job) asks the loop to
    stop at the next step boundary, so the checkpoint is a consistent state; a second one
    interrupts at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> StopOnInterrupt:
        try:
            self._previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        except ValueError:  # not the main thread (some launchers): default behaviour
            self._previous = {}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def rng_states(data_rng: torch.Generator) -> dict[str, torch.Tensor]:
    """The generator states a checkpoint carries (uint8 state tensors): torch's global one
    (dropout), the data order's and, where there is CUDA, the current GPU's."""
    states = {"torch": torch.get_rng_state(), "data": data_rng.get_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state()
    return states


def restore(
    run_dir: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    data_rng: torch.Generator,
) -> tuple[int, int, list[dict[str, Any]]]:
    """Loads the run's checkpoint; returns (step, tokens seen, metrics rows up to that step)."""
    state = load_checkpoint(run_dir, model, optimizer)
    tensors = load_trainer_tensors(run_dir)
    if "torch" not in tensors or "data" not in tensors:
        raise PosxError(f"checkpoint in {run_dir} has no RNG state; it cannot be resumed exactly")
    torch.set_rng_state(tensors["torch"])
    data_rng.set_state(tensors["data"])
    if "cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["cuda"])
    rows: list[dict[str, Any]] = []
    if (run_dir / "metrics.csv").is_file():
        old = pd.read_csv(run_dir / "metrics.csv")
        rows = old[old["step"] <= state["step"]].to_dict("records")
    return int(state["step"]), int(state["tokens"]), rows
