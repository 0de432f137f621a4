"""Checkpoints: a directory of safetensors + JSON (no pickle), swapped in as a whole.

``checkpoint/`` holds model.safetensors, optimizer.safetensors, trainer.json and (for exact
resumption) trainer.safetensors with RNG states. A new checkpoint is built beside the old one and
renamed into place, so a kill at any moment leaves one complete checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from safetensors import SafetensorError, safe_open

if TYPE_CHECKING:  # imported where tensors move: reading a header or trainer.json needs none
    import torch

from posx.errors import PosxError, one_line
from posx.storage.atomic import shared_mode
from posx.storage.results import SCHEMA_VERSION, load_json_object, write_json

CHECKPOINT = "checkpoint"
# What a checkpoint's weights mean: saved with them, compared with the config that loads them.
IDENTITY_GROUPS = ("encoding", "task", "model", "positions")


def save_checkpoint(
    run_dir: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    tensors: dict[str, torch.Tensor] | None = None,
) -> None:
    """Writes ``checkpoint/`` = model.safetensors, optimizer.safetensors, trainer.json and
    (with ``tensors``, e.g. RNG states) trainer.safetensors.

    The new directory is built beside the old one and swapped in, so a kill at any moment
    leaves one complete checkpoint (``load_checkpoint`` also accepts the swap's leftover).
    """
    final = run_dir / CHECKPOINT
    for stale in run_dir.glob(f".{CHECKPOINT}.*"):  # half-built by a killed writer; can be GBs
        if stale.name != f".{CHECKPOINT}.old":
            shutil.rmtree(stale, ignore_errors=True)
    from safetensors.torch import save_file, save_model

    tmp = Path(tempfile.mkdtemp(dir=run_dir, prefix=".checkpoint."))
    try:
        tmp.chmod(shared_mode(directory=True))  # mkdtemp makes 0700
        save_model(model, str(tmp / "model.safetensors"))
        optim_tensors, meta = _flatten_optimizer(optimizer)
        save_file(optim_tensors, str(tmp / "optimizer.safetensors"))
        if tensors:
            extra = {k: v.contiguous().cpu() for k, v in tensors.items()}
            save_file(extra, str(tmp / "trainer.safetensors"))
        write_json(
            tmp / "trainer.json", {"schema_version": SCHEMA_VERSION, **state, "optimizer": meta}
        )
        for path in tmp.iterdir():  # safetensors writes 0600
            path.chmod(shared_mode())
        old = run_dir / f".{CHECKPOINT}.old"
        # Without `final`, `old` is the only complete checkpoint (a kill between the two
        # renames below), so it may go only once `tmp` has taken its place.
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _flatten_optimizer(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], Any]:
    import torch

    sd = optimizer.state_dict()
    tensors, scalars = {}, {}
    for pid, slots in sd["state"].items():
        for name, value in slots.items():
            if torch.is_tensor(value):
                tensors[f"{pid}.{name}"] = value.detach().contiguous().cpu()
            else:
                scalars[f"{pid}.{name}"] = value
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def checkpoint_dir(run_dir: Path) -> Path:
    """The run's complete checkpoint directory; an error naming the run when there is none."""
    for name in (CHECKPOINT, f".{CHECKPOINT}.old"):
        path = run_dir / name
        if (path / "trainer.json").is_file() and (path / "model.safetensors").is_file():
            return path
    raise PosxError(f"run has no checkpoint: {run_dir} (train it first, or pick another run)")


def _corrupt(path: Path, run_dir: Path, err: BaseException) -> PosxError:
    return PosxError(
        f"checkpoint file {path.name} of {run_dir} is truncated or corrupt ({one_line(err)}); "
        "retrain, or restore the file from a backup"
    )


def _read_tensors(path: Path, run_dir: Path) -> dict[str, torch.Tensor]:
    """A safetensors file of the run's checkpoint; a truncated or corrupt one is a PosxError."""
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (OSError, SafetensorError) as err:
        raise _corrupt(path, run_dir, err) from err


def _tensor_shapes(path: Path, run_dir: Path) -> dict[str, list[int]]:
    """Tensor shapes from a safetensors header. Reading the header also catches truncation: it
    names byte ranges past the end of a truncated file."""
    try:  # numpy: a header is read without torch (no tensor is made either way)
        with safe_open(str(path), framework="numpy") as f:
            return {name: list(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
    except (OSError, SafetensorError) as err:
        raise _corrupt(path, run_dir, err) from err


def _trainer_state(path: Path, run_dir: Path) -> dict[str, Any]:
    try:
        state = load_json_object(path / "trainer.json")
    except (OSError, ValueError) as err:
        raise _corrupt(path / "trainer.json", run_dir, err) from err
    if state.get("schema_version", 0) > SCHEMA_VERSION:
        raise PosxError(
            f"checkpoint in {run_dir} was written by a newer posx "
            f"(schema {state['schema_version']} > {SCHEMA_VERSION}); upgrade posx"
        )
    return state


def config_identity(cfg: DictConfig) -> dict[str, Any]:
    """What the weights were trained as: the ``encoding``, ``task``, ``model`` and
    ``positions`` configs (targets and arguments), resolved, as JSON data."""
    try:
        ident = {
            g: OmegaConf.to_container(cfg[g], resolve=True) if cfg.get(g) is not None else None
            for g in IDENTITY_GROUPS
        }
    except OmegaConfBaseException as err:
        raise PosxError(f"cannot resolve the run's config: {one_line(err)}") from err
    return json.loads(json.dumps(ident, default=str))


def _difference(ours: Any, theirs: Any, path: str) -> tuple[str, Any, Any] | None:
    """The first key path where two JSON values differ, with both values."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for key in sorted({*ours, *theirs}):
            found = _difference(ours.get(key), theirs.get(key), f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            found = _difference(a, b, f"{path}[{i}]")
            if found:
                return found
        return None
    return None if ours == theirs else (path, ours, theirs)


def check_identity(
    run_dir: Path, cfg: DictConfig, source: str, state: dict[str, Any] | None = None
) -> None:
    """Refuses a config that differs from what the checkpoint was trained with (an edited
    ``.hydra/config.yaml`` would otherwise label one encoding's weights as another's).

    Checkpoints written before identities were recorded are not checked.

    Args:
        run_dir: The run directory.
        cfg: The config about to be built.
        source: Where it came from, for the message.
        state: The checkpoint's ``trainer.json`` when the caller has read it already.

    Raises:
        PosxError: One line naming the first differing setting and both values.
    """
    if state is None:
        state = _trainer_state(checkpoint_dir(run_dir), run_dir)
    saved = state.get("identity")
    if not isinstance(saved, dict):
        return
    found = _difference(config_identity(cfg), saved, "")
    if found:
        key, ours, theirs = found
        raise PosxError(
            f"{source} does not match the checkpoint in {run_dir}: {key.lstrip('.')} is "
            f"{ours!r} there but {theirs!r} in the checkpoint (was the config edited?); restore "
            "it, and change settings at eval time with key=value instead"
        )


def verify_headers(run_dir: Path, resume: bool = False) -> dict[str, list[int]]:
    """Checks that the safetensors files evaluation (``resume``: also resuming) reads have
    readable headers (cheap: a command can refuse a damaged run before any work); returns the
    weights' shapes.

    Raises:
        PosxError: No checkpoint, or a truncated or corrupt file (naming it).
    """
    path = checkpoint_dir(run_dir)
    shapes = _tensor_shapes(path / "model.safetensors", run_dir)
    if resume:
        for file in sorted(path.glob("*.safetensors")):
            if file.name != "model.safetensors":
                _tensor_shapes(file, run_dir)
    return shapes


def parameter_shapes(run_dir: Path) -> dict[str, list[int]]:
    """Every weight's shape in the run's checkpoint, read from the safetensors header only."""
    path = checkpoint_dir(run_dir) / "model.safetensors"
    return _tensor_shapes(path, run_dir)


def load_trainer_tensors(run_dir: Path) -> dict[str, torch.Tensor]:
    """The extra tensors saved with the checkpoint (RNG states); empty when there are none."""
    path = checkpoint_dir(run_dir) / "trainer.safetensors"
    return _read_tensors(path, run_dir) if path.is_file() else {}


def _check_shapes(
    run_dir: Path, model: torch.nn.Module, path: Path, shapes: dict[str, list[int]] | None = None
) -> None:
    """Names the first parameter whose shape differs between checkpoint and config."""
    expected = {k: list(v.shape) for k, v in model.state_dict().items()}
    for name, shape in (shapes or _tensor_shapes(path, run_dir)).items():
        if name in expected and shape != expected[name]:
            raise PosxError(
                f"checkpoint in {run_dir} does not fit its config: {name} is "
                f"{shape} in the checkpoint but {expected[name]} in the model "
                "built from .hydra/config.yaml (was the config edited, or an override changed "
                "the model?)"
            )


def load_checkpoint(
    run_dir: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None
) -> dict[str, Any]:
    """Loads weights (and optimizer state) into the given objects; returns the trainer state.

    A missing, truncated, corrupt, newer-schema or misfitting checkpoint is a one-line
    PosxError naming the run and the file.
    """
    path = checkpoint_dir(run_dir)
    state = _trainer_state(path, run_dir)
    load_weights(run_dir, model)
    if optimizer is not None:
        tensors = _read_tensors(path / "optimizer.safetensors", run_dir)
        meta = state["optimizer"]
        slots: dict[int, dict[str, Any]] = {}
        for key, value in {**tensors, **meta["scalars"]}.items():
            pid, name = key.split(".", 1)
            slots.setdefault(int(pid), {})[name] = value
        optimizer.load_state_dict({"state": slots, "param_groups": meta["param_groups"]})
    return state


def load_weights(
    run_dir: Path, model: torch.nn.Module, shapes: dict[str, list[int]] | None = None
) -> None:
    """Loads the checkpoint's weights into ``model`` (what evaluation needs: no optimizer, no
    trainer state).

    Args:
        run_dir: The run directory.
        model: The model built from the run's config.
        shapes: The weights' shapes when the caller has read the header already.

    Raises:
        PosxError: A missing, truncated or corrupt file, or one that does not fit ``model``.
    """
    from safetensors.torch import load_model

    path = checkpoint_dir(run_dir)
    _check_shapes(run_dir, model, path / "model.safetensors", shapes)
    try:
        missing, unexpected = load_model(model, str(path / "model.safetensors"), strict=False)
    except (OSError, ValueError, RuntimeError, SafetensorError) as err:
        raise PosxError(
            f"checkpoint in {run_dir} is unreadable or does not fit the model: {one_line(err)}"
        ) from err
    if missing or unexpected:
        raise PosxError(
            f"checkpoint in {run_dir} does not fit its config: missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(unexpected)[:3]}"
        )


def read_weights(run_dir: Path) -> tuple[dict[str, torch.Tensor], str]:
    """The checkpoint's weights and the SHA-256 of its model.safetensors, from one read of the
    file (so the hash is of the bytes loaded): what an extension (``posx extend``) starts from.

    Raises:
        PosxError: No checkpoint, or a truncated or corrupt file (naming the run).
    """
    from safetensors.torch import load as safetensors_load

    path = checkpoint_dir(run_dir) / "model.safetensors"
    try:
        data = path.read_bytes()
        return safetensors_load(data), hashlib.sha256(data).hexdigest()
    except (OSError, SafetensorError) as err:
        raise _corrupt(path, run_dir, err) from err


def checkpoint_state(run_dir: Path) -> dict[str, Any]:
    """The checkpoint's ``trainer.json`` (its ``step``, ``tokens``, ``identity``).

    Raises:
        PosxError: No checkpoint, or a damaged or newer-schema file (naming the run).
    """
    return _trainer_state(checkpoint_dir(run_dir), run_dir)
