"""Stopping cleanly and resuming exactly: the Ctrl-C handler that stops training at a step
boundary, the RNG state a checkpoint carries, restoring a run from its checkpoint, and starting
an extension (``posx extend``) from its parent's final weights."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from omegaconf import DictConfig

from posx.errors import PosxError
from posx.saved import SavedRun
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


def resize_to_fit(model: torch.nn.Module, name: str, old: torch.Tensor, how: str) -> torch.Tensor:
    """A parent's parameter made to fit this model's shape by the module that owns it (one
    that defines ``resize_parameter(name, old, how)``, e.g. the learned table), as
    ``extend.resize`` (``how``) says.

    Args:
        model: The extension's model.
        name: The parameter's name in ``model`` (``encoding.table.weight``).
        old: The parent's tensor.
        how: ``extend.resize``: ``none`` refuses.

    Raises:
        PosxError: ``how`` is ``none``, or no module knows how to resize the parameter.
    """
    want = list(model.state_dict()[name].shape)
    parts, resize = name.split("."), None
    for cut in range(len(parts) - 1, 0, -1):  # the deepest module that owns the parameter
        owner = model.get_submodule(".".join(parts[:cut]))
        resize = getattr(owner, "resize_parameter", None)
        if resize is None:
            continue
        if how == "none":
            break
        try:
            return resize(".".join(parts[cut:]), old, how)
        except ValueError as err:
            raise PosxError(f"cannot resize {name}: {err}") from err
    known = "extend.resize=interpolate or copy" if resize is not None else "no resize rule"
    raise PosxError(
        f"the parent's {name} is {list(old.shape)} but this run's is {want}: the overrides "
        f"change a parameter's shape ({known} for it)"
    )


def start_from_parent(cfg: DictConfig, model: torch.nn.Module, data_rng: torch.Generator) -> None:
    """Loads the parent's final weights (``extend.parent``) into a new extension's ``model``
    and continues the parent's data order (its checkpointed data generator, so the extension
    reads on through the held-in text); the optimizer and the schedule start fresh.

    Args:
        cfg: The extension's config (``extend.*`` set by ``posx extend``).
        model: The freshly built model (its shapes may differ where ``extend.resize`` allows).
        data_rng: The data generator, set to the parent's final state when it saved one.

    Raises:
        PosxError: The parent's checkpoint changed since ``posx extend`` checked it, is
            damaged, or does not fit the model.
    """
    run, recorded = SavedRun(str(cfg.extend.parent)), str(cfg.extend.parent_sha256 or "")
    parent = run.path
    weights, sha = run.weights()
    if recorded and sha != recorded:
        raise PosxError(
            f"the parent run {parent} changed since this extension was started (its "
            f"model.safetensors had sha256 {recorded[:12]}, now {sha[:12]}); restore it, or "
            "start a new extension with `posx extend`"
        )
    own = model.state_dict()
    for name, tensor in weights.items():
        if name in own and tensor.shape != own[name].shape:
            weights[name] = resize_to_fit(model, name, tensor, str(cfg.extend.resize))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    # a tied weight (the output layer is the embedding) is saved once, under one of its names
    loaded = {own[n].data_ptr() for n in weights if n in own}
    missing = [n for n in missing if own[n].data_ptr() not in loaded]
    if missing or unexpected:
        raise PosxError(
            f"the parent run {parent} does not fit this extension's model: missing "
            f"{sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]}"
        )
    state = run.trainer_tensors()
    if "data" in state:
        data_rng.set_state(state["data"])
