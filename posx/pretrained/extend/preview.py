"""The name of an extension's run, made from the model's ``config.json`` and the settings alone
(no torch, no transformers), so ``posx extend hf:`` says where it writes and what it does
within a second of starting: :func:`preview`. The plan (:mod:`posx.pretrained.extend.plan`)
names the run with the same functions once the model's config is loaded."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from posx.errors import ConfigError, PosxError
from posx.pretrained import load
from posx.pretrained.extend.method import Method, read_method
from posx.pretrained.extend.settings import Options, check_settings
from posx.pretrained.naming import RUNS_DIR, model_label, trained_length

# settings that do not change what is trained (the run directory's name leaves them out)
NOT_IDENTITY = ("label", "experiment", "root", "eval.lengths", "eval.tokens", "eval.batch_tokens",
                "train.checkpoint_every", "train.max_memory", "train.device",
                "train.world_size")  # fmt: skip


def identity(revision: str, values: dict[str, Any]) -> str:
    """12 hex naming the run: the base's revision and every setting that changes training."""
    kept = {k: v for k, v in values.items() if k not in NOT_IDENTITY}
    text = json.dumps([revision, kept], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def fingerprint(revision: str, values: dict[str, Any]) -> str:
    """16 hex naming the configuration: the identity without the seed, so the seeds of one
    setting are one configuration in ``posx report`` and ``posx check`` (the written weights
    differ per seed and are no part of it)."""
    kept = {k: v for k, v in values.items() if k not in (*NOT_IDENTITY, "seed")}
    text = json.dumps(["extension", revision, kept], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def extension_label(base: str, method: Method, factor: float, window: int) -> str:
    """``BASE+yarn×4+ft@16384``, as posx names its own extensions."""
    parts = [base]
    if method.scaling:
        parts.append(f"{method.scaling}×{factor:g}")
    if method.pose_chunks:
        parts.append("pose")
    return "+".join(parts) + f"+ft@{window}"


def run_directory(root: str, label: str, revision: str, values: dict[str, Any]) -> Path:
    """``<root>/pretrained/<label>_<12 hex>`` (``×`` and ``@`` spelt for a file name)."""
    name = label.replace("×", "x").replace("@", "")
    return Path(root) / RUNS_DIR / f"{name}_{identity(revision, values)}"


def config_view(raw: dict[str, Any]) -> SimpleNamespace:
    """``config.json`` as plain data, read as a transformers config reads the fields naming
    the context: a ``rope_scaling`` of older files as ``rope_parameters``."""
    view = dict(raw)
    old = raw.get("rope_scaling")
    if not isinstance(raw.get("rope_parameters"), dict) and isinstance(old, dict):
        view["rope_parameters"] = {**old, "rope_type": old.get("rope_type") or old.get("type")}
    view.setdefault("model_type", "model")
    return SimpleNamespace(**view)


@dataclass(frozen=True)
class Preview:
    """Where an extension will write and what it will do, before anything heavy is loaded.

    Attributes:
        run: The run directory; None where ``config.json`` names no context (the plan then
            names it, from the config as transformers fills it in).
        doing: One line: the method, the base, the lengths.
    """

    run: Path | None
    doing: str


def preview(word: str, values: dict[str, Any], options: Options) -> Preview:
    """The run directory and a line saying what the extension does, from the model's files
    (found as the plan finds them; a directory's revision hashes its files) and the settings.

    Raises:
        ConfigError: The model or the method cannot be found.
    """
    method = read_method(str(values["extension"]), options.config_dirs)
    source = load.find_model(word, options.revision, options.allow_download,
                             weights=not options.dry_run)  # fmt: skip
    try:
        trained, _ = trained_length(config_view(source.config), None)
    except ConfigError:  # a context transformers' defaults fill in: the plan names the run
        return Preview(None, f"extending {source.name} with extension={method.name}")
    factor = float(values["extend.factor"])
    length = int(values["extend.length"] or round(factor * trained))
    window = length if method.at_target else trained
    label = values["label"] or extension_label(model_label(source.name, None), method, factor,
                                               window)  # fmt: skip
    run = run_directory(str(values["root"]), label, source.revision, values)
    steps = values["extend.steps"]
    doing = (f"extending {source.name} with extension={method.name} from {trained} to "
             f"{length} tokens, fine-tuning at {window} for {steps} steps")  # fmt: skip
    return Preview(run, doing)


def resumable(run: Path, info: dict[str, Any]) -> dict[str, Any]:
    """The settings of an extension ``posx resume`` can continue (``info``: its ``run.json``).

    Raises:
        ConfigError: It finished already.
        PosxError: Its ``run.json`` lacks the settings.
    """
    if info.get("status") == "extended":
        raise ConfigError(
            f"{run} already finished; nothing to resume (evaluate it with posx eval {run})"
        )
    ext = info.get("extension") or {}
    if not isinstance(ext.get("settings"), dict) or not ext.get("word"):
        raise PosxError(f"{run}/run.json is damaged (no extension settings); it cannot be resumed")
    return check_settings(ext["settings"])
