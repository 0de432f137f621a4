"""Typed config schemas (registered in Hydra's ConfigStore) and their validation.

The schemas make a misspelled key or a wrong type an error at composition time. ``encoding``
and ``task`` stay open (``_target_`` plus the constructor's own arguments), so a user can point
``_target_`` at their own class; their arguments are checked when they are instantiated.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from posx.errors import ConfigError

CONFIG_DIR = Path(
    os.environ.get("POSX_CONFIG_DIR", Path(__file__).resolve().parent.parent / "configs")
)
GROUPS = ("model", "encoding", "task", "train", "eval", "positions", "experiment")


@dataclass
class ModelConfig:
    """Decoder-only Transformer dimensions."""

    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int = 256
    dropout: float = 0.0
    tie_embeddings: bool = True
    attn_block_size: int = 256


@dataclass
class TrainConfig:
    """Optimisation and bookkeeping for one training run."""

    length: int = 64
    steps: int = 1000
    batch_size: int = 32
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    log_every: int = 10
    checkpoint_every: int = 0
    eval_at_end: bool = True
    device: str = "auto"
    threads: int = 0
    progress: bool = True
    resume: bool = False


@dataclass
class EvalConfig:
    """Length sweep: which lengths, how much held-out data, in what batches."""

    lengths: list[int] = field(default_factory=lambda: [64, 128, 256, 512])
    tokens: int = 16384
    batch_tokens: int = 8192
    seed: int = 1234
    mode: str = "full"  # full | sliding (see posx/evaluation/protocol.py)
    window: int | None = None  # sliding: tokens the model reads at once (default train.length)
    stride: int | None = None  # sliding: tokens each window moves on (default window // 2)
    buckets: str = "log"  # per-position loss buckets: log (powers of two) or a width in tokens


@dataclass
class PosxConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    encoding: Any = None
    task: Any = None
    positions: Any = None  # training-time position strategy (configs/positions/)
    seed: int = 0
    root: str = "results"


def _uid() -> str:
    """A short random id, fixed per ``posx train`` invocation (see :func:`new_run_id`)."""
    if "POSX_UID" not in os.environ:
        new_run_id()
    return os.environ["POSX_UID"]


def _stamp() -> str:
    """The invocation's start time, ``YYYYmmdd-HHMMSS``."""
    if "POSX_STAMP" not in os.environ:
        new_run_id()
    return os.environ["POSX_STAMP"]


def run_label(encoding: str, positions: str | None = None) -> str:
    """An encoding's label in run names and tables: ``rope``, or ``rope+randomized`` when a
    training-time position strategy other than the default is used."""
    return encoding if positions in (None, "", "default", "None") else f"{encoding}+{positions}"


def new_run_id() -> None:
    """Fixes the id and time stamp that name this invocation's run or sweep directory.

    They live in the environment so that launcher worker processes (joblib, submitit), which
    resolve ``hydra.sweep.dir`` again on their side, inherit the same values, while every
    ``posx train`` invocation (also two started in the same second) gets its own.
    """
    os.environ["POSX_UID"] = secrets.token_hex(3)
    os.environ["POSX_STAMP"] = time.strftime("%Y%m%d-%H%M%S")


def register() -> None:
    """Registers the schema and the ``posx_uid`` resolver (idempotent)."""
    ConfigStore.instance().store(name="posx_schema", node=PosxConfig)
    for name, fn in (("posx_uid", _uid), ("posx_stamp", _stamp), ("posx_label", run_label)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


def positive_lengths(values: list[Any], what: str) -> list[int]:
    """Checks a length list: positive integers, strictly increasing."""
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ConfigError(f"{what} must be positive integers, got {v!r}")
        out.append(v)
    if not out:
        raise ConfigError(f"{what} is empty; give at least one length")
    if out != sorted(set(out)):
        raise ConfigError(f"{what} must be strictly increasing without repeats, got {out}")
    return out


def validate(cfg: DictConfig) -> None:
    """Checks what the schema's types cannot; raises :class:`ConfigError` with one line."""
    m, t, e = cfg.model, cfg.train, cfg.eval
    for name in ("d_model", "n_layers", "n_heads", "d_ff", "attn_block_size"):
        if m[name] <= 0:
            raise ConfigError(f"model.{name} must be positive, got {m[name]}")
    if m.d_model % m.n_heads:
        raise ConfigError(
            f"model.d_model ({m.d_model}) must be divisible by model.n_heads ({m.n_heads})"
        )
    for name in ("length", "steps", "batch_size", "log_every"):
        if t[name] <= 0:
            raise ConfigError(f"train.{name} must be positive, got {t[name]}")
    if not 0 < t.lr <= 1e38 or not 0 <= t.min_lr_ratio <= 1:  # 1e38: float32 range
        raise ConfigError(
            f"train.lr must be in (0, 1e38] and train.min_lr_ratio in [0, 1], "
            f"got {t.lr}, {t.min_lr_ratio}"
        )
    if t.warmup_steps < 0 or t.checkpoint_every < 0 or t.threads < 0:
        raise ConfigError(
            "train.warmup_steps, train.checkpoint_every and train.threads must be >= 0"
        )
    if t.device not in ("auto", "cpu", "cuda", "mps") and not t.device.startswith("cuda:"):
        raise ConfigError(f"train.device must be auto, cpu, cuda, cuda:N or mps, got {t.device!r}")
    positive_lengths(list(e.lengths), "eval.lengths")
    if e.tokens <= 0 or e.batch_tokens <= 0:
        raise ConfigError(
            f"eval.tokens and eval.batch_tokens must be positive, got {e.tokens}, {e.batch_tokens}"
        )
    validate_protocol(e, t.length)
    for group in ("encoding", "task"):
        node = cfg.get(group)
        if not isinstance(node, DictConfig) or "_target_" not in node:
            raise ConfigError(f"{group} config needs a _target_ (choose one with {group}=NAME)")


def validate_protocol(e: DictConfig, train_length: int) -> None:
    """Checks ``eval.mode``, ``eval.window``, ``eval.stride`` and ``eval.buckets``."""
    from posx.evaluation.buckets import parse_buckets

    if e.mode not in ("full", "sliding"):
        raise ConfigError(f"eval.mode must be full or sliding, got {e.mode!r}")
    for name in ("window", "stride"):
        if e[name] is not None and e[name] <= 0:
            raise ConfigError(f"eval.{name} must be a positive number of tokens, got {e[name]}")
        if e[name] is not None and e.mode != "sliding":
            raise ConfigError(f"eval.{name} applies to eval.mode=sliding only, not {e.mode!r}")
    window = e.window or train_length
    if e.stride is not None and e.stride > window:
        raise ConfigError(
            f"eval.stride ({e.stride}) must not exceed the window ({window}): tokens between "
            "windows would never be scored"
        )
    parse_buckets(e.buckets)


def choices(group: str, config_dir: Path = CONFIG_DIR) -> list[str]:
    """Option names of a config group: the yaml files in ``configs/<group>/``."""
    return sorted(p.stem for p in (config_dir / group).glob("*.yaml"))


def describe_option(group: str, name: str, config_dir: Path = CONFIG_DIR) -> str:
    """The option's description: its yaml's leading ``#`` comment lines."""
    lines = []
    for line in (config_dir / group / f"{name}.yaml").read_text().splitlines():
        if not line.startswith("#"):
            break
        if not line.startswith("# @package"):
            lines.append(line.lstrip("# ").strip())
    return " ".join(x for x in lines if x)
