"""What makes two runs the same experiment: a fingerprint of the resolved config.

Two runs are replicates of one experiment when their configs agree on every key except the
seed and the keys in :data:`NOT_IDENTITY` (where files go, how often to log, which lengths to
evaluate: nothing that changes a trained weight or a reported number). The fingerprint is a
short SHA-256 of those keys, so a report can group runs by their whole configuration, count
distinct seeds, and refuse to average two different models that happen to share a label.

Configs are first merged onto the typed schema, so a run saved before a key was added compares
equal to a new run that leaves the key at its default.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posx.config.schema import PosxConfig

Scalar = str | int | float | bool | None
FINGERPRINT_VERSION = 1  # part of the hash: a change of the rules below changes every fingerprint
FINGERPRINT_CHARS = 12

# Keys (and everything below them) that do not identify an experiment, with the reason.
NOT_IDENTITY: dict[str, str] = {
    "seed": "the replicate: runs that differ only in seed are one experiment",
    "root": "where results are written",
    "invocation": "when and by which `posx train` call the run was started",
    "label": "the name the run is shown under (rows are grouped by it anyway)",
    "chosen": "which yaml options were chosen (their content is what counts)",
    "experiment_name": "the preset the run came from (its settings are what counts)",
    "design": "read by option yamls through interpolations: what it changes is in their keys",
    "eval.variants": "which eval-time variants were evaluated (each row records its overrides)",
    "hydra": "output directories and launcher settings",
    "train.device": "where it ran (recorded per eval row as `device`)",
    "train.threads": "CPU threads",
    "train.progress": "progress bar",
    "train.progress_every": "progress line interval",
    "logger": "experiment trackers the run reports to",
    "train.log_every": "logging interval",
    "train.checkpoint_every": "checkpoint interval (resuming is exact)",
    "train.resume": "whether an interrupted run was resumed",
    "train.eval_at_end": "whether evaluation followed training",
    "eval.lengths": "which lengths were evaluated (each row records its length)",
    "eval.batch_tokens": "evaluation batch size",
    "eval.buckets": "position buckets of eval_positions.csv",
    "eval.mode": "recorded per eval row (`mode`)",
    "eval.window": "recorded per eval row (`window`)",
    "eval.stride": "recorded per eval row (`stride`)",
}


def _container(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """``cfg`` as plain data: merged onto the schema where it fits, interpolations resolved."""
    node = cfg if isinstance(cfg, DictConfig) else OmegaConf.create(dict(cfg))
    # A config that does not fit the schema (not posx's, or from a schema since changed) is
    # compared as it is.
    with contextlib.suppress(OmegaConfBaseException):
        node = OmegaConf.merge(OmegaConf.structured(PosxConfig), node)
    try:
        data = OmegaConf.to_container(node, resolve=True, throw_on_missing=False)
    except OmegaConfBaseException:  # e.g. a resolver only Hydra's app registers
        data = OmegaConf.to_container(node, resolve=False)
    assert isinstance(data, dict)
    return data


def _flatten(value: Any, prefix: str, out: dict[str, Scalar]) -> None:
    if isinstance(value, Mapping):
        for key in sorted(value, key=str):
            _flatten(value[key], f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(value, list | tuple):
        out[prefix] = json.dumps(list(value), sort_keys=True, default=str)
    elif value is None or isinstance(value, str | int | float | bool):
        out[prefix] = value
    else:
        out[prefix] = str(value)


def flat_config(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Scalar]:
    """Every leaf of the resolved config under its dotted key, e.g. ``{"train.steps": 1000}``.

    Lists become their JSON text (``"[64, 128]"``), so every value is a scalar.
    """
    out: dict[str, Scalar] = {}
    _flatten(_container(cfg), "", out)
    return out


def is_identity_key(key: str) -> bool:
    """Whether ``key`` tells experiments apart (see :data:`NOT_IDENTITY`)."""
    return not any(key == k or key.startswith(f"{k}.") for k in NOT_IDENTITY)


def identity_config(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Scalar]:
    """:func:`flat_config` without the keys that do not identify an experiment."""
    return {k: v for k, v in flat_config(cfg).items() if is_identity_key(k)}


def _canonical(value: Scalar) -> Scalar:
    # 1 and 1.0 are one setting (a yaml may write either for an open node such as encoding.*).
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def fingerprint_of(identity: Mapping[str, Scalar]) -> str:
    """The fingerprint of an already flattened identity config."""
    canon = {k: _canonical(v) for k, v in identity.items()}
    text = json.dumps({"v": FINGERPRINT_VERSION, "config": canon}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:FINGERPRINT_CHARS]


def config_fingerprint(cfg: DictConfig | Mapping[str, Any]) -> str:
    """Short hex SHA-256 of the config without seed, output paths and bookkeeping keys."""
    return fingerprint_of(identity_config(cfg))


def saved_config(run_dir: Path) -> DictConfig | None:
    """The config Hydra saved for a run (``.hydra/config.yaml``), or None when there is none."""
    path = run_dir / ".hydra" / "config.yaml"
    if not path.is_file():
        return None
    cfg = OmegaConf.load(path)
    return cfg if isinstance(cfg, DictConfig) else None


def run_fingerprint(run_dir: Path, cfg: DictConfig | None = None) -> str:
    """A run's fingerprint, from its saved config (the source every reader shares), else from
    ``cfg``; ``""`` when neither exists.

    Training and evaluation both call this, so ``run.json`` and every ``eval.csv`` row carry the
    fingerprint that ``posx report`` computes again from the same file.
    """
    saved = saved_config(run_dir)
    if saved is not None:
        return config_fingerprint(saved)
    return config_fingerprint(cfg) if cfg is not None else ""
