"""Typed config schemas (registered in Hydra's ConfigStore) and their validation.

The schemas make a misspelled key or a wrong type an error at composition time. ``encoding``
and ``task`` stay open (``_target_`` plus the constructor's own arguments), so a user can point
``_target_`` at their own class; their arguments are checked when they are instantiated.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posx.errors import ConfigError
from posx.evaluation.buckets import parse_buckets

CONFIG_DIR = Path(
    os.environ.get("POSX_CONFIG_DIR", Path(__file__).resolve().parent.parent / "configs")
)
GROUPS = ("model", "encoding", "task", "train", "eval", "positions", "experiment")
INT64_MAX = 2**63 - 1


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
    # Memory a training step (and the evaluation after it) may use, e.g. 8G; None: what is
    # available. Checked against an estimate before anything is allocated (posx.resources).
    max_memory: str | None = None


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
    # ``<start time>_<random id>`` of the ``posx train`` invocation, which names its run or sweep
    # directory. It travels in the config (as an override) so that launcher workers (joblib,
    # submitit), which resolve ``hydra.sweep.dir`` again on their side, agree on it.
    invocation: str = ""


# The typed nodes of a config: their keys are fixed by their dataclass.
_TYPED_NODES = (("", PosxConfig), ("model", ModelConfig), ("train", TrainConfig),
                ("eval", EvalConfig))  # fmt: skip


def run_label(encoding: str, positions: str | None = None) -> str:
    """An encoding's label in run names and tables: ``rope``, or ``rope+randomized`` when a
    training-time position strategy other than the default is used."""
    return encoding if positions in (None, "", "default", "None") else f"{encoding}+{positions}"


def new_invocation() -> str:
    """``YYYYmmdd-HHMMSS_<6 hex digits>``: unique per ``posx train`` invocation, also for two
    started in the same second."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}_{secrets.token_hex(3)}"


def register() -> None:
    """Registers the schema and the ``posx_label`` resolver (idempotent). Called by whatever
    composes a config, never at import time."""
    ConfigStore.instance().store(name="posx_schema", node=PosxConfig)
    if not OmegaConf.has_resolver("posx_label"):
        OmegaConf.register_new_resolver("posx_label", run_label)


def one_line(err: BaseException) -> str:
    """The first line of an error and of its root cause, joined (Hydra wraps the cause)."""
    parts: list[str] = []
    while err is not None:
        text = str(err).strip().splitlines()[0].rstrip(".") if str(err).strip() else ""
        if text and not any(text in p for p in parts):  # a cause the message already quotes
            parts.append(text)
        err = err.__cause__  # type: ignore[assignment]
    return ": ".join(parts[:1] + parts[-1:]) if len(parts) > 1 else (parts[0] if parts else "error")


def compose(overrides: list[str], with_hydra: bool = False) -> DictConfig:
    """The config ``posx train OVERRIDES`` would run with; bad overrides raise ConfigError.

    ``with_hydra`` also composes Hydra's own node (launcher, sweeper, ...), so that
    ``hydra/...`` overrides are checked too.
    """
    register()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        try:
            return hydra_compose(
                config_name="config", overrides=overrides, return_hydra_config=with_hydra
            )
        except (HydraException, OmegaConfBaseException, ValueError) as err:
            message = _missing_option(err) or one_line(err) + _known_keys(err, overrides)
            raise ConfigError(message) from err


def _missing_option(err: BaseException) -> str:
    """``unknown hydra/launcher 'nosuch'; choose from: basic, joblib, ...`` from Hydra's
    multi-line message for a config group option that does not exist; empty otherwise."""
    text = str(err).split("Config search path")[0]
    found = re.search(r"Could not find '(.+)/([^/']+)'", text)
    options = re.findall(r"^\t(\S+)$", text, re.MULTILINE)
    if not found or not options:
        return ""
    return f"unknown {found[1]} '{found[2]}'; choose from: {', '.join(options)}"


def _known_keys(err: BaseException, overrides: list[str]) -> str:
    """For an override of a key that does not exist: the closest key and the keys there are
    (from the config composed without that override); empty for other errors."""
    found = re.search(r"Could not override '([^']+)'", str(err))
    if not found:
        return ""
    key = found[1]
    rest = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != key]
    try:
        return key_hint(hydra_compose(config_name="config", overrides=rest), key)
    except (HydraException, OmegaConfBaseException, ValueError):
        return ""


def key_hint(cfg: DictConfig, key: str) -> str:
    """``; did you mean 'model.d_model'? model keys: ...`` for a ``key`` missing from ``cfg``."""
    parent, _, leaf = key.lstrip("+~").rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    if not isinstance(node, DictConfig):
        return ""
    keys = [str(k) for k in node if not str(k).startswith("_")]
    close = difflib.get_close_matches(leaf, keys, n=1)
    hint = f"; did you mean '{parent + '.' if parent else ''}{close[0]}'?" if close else ";"
    return f"{hint} {parent or 'top-level'} keys: {', '.join(keys) or '(none)'}"


def check_group_value(group: str, value: str) -> None:
    """``encoding=rpoe`` fails here, naming the options, before Hydra's longer message."""
    if group in GROUPS and value not in ("null", "None") and value not in choices(group):
        raise ConfigError(f"unknown {group} '{value}'; choose from: {', '.join(choices(group))}")


def positive_lengths(values: list[Any], what: str) -> list[int]:
    """Checks a length list: positive integers (int64: positions are int64 tensors), strictly
    increasing."""
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ConfigError(f"{what} must be positive integers, got {v!r}")
        if v > INT64_MAX:
            raise ConfigError(f"{what} must be at most {INT64_MAX} (int64), got {v}")
        out.append(v)
    if not out:
        raise ConfigError(f"{what} is empty; give at least one length")
    if out != sorted(set(out)):
        raise ConfigError(f"{what} must be strictly increasing without repeats, got {out}")
    return out


def check_typed_keys(cfg: DictConfig) -> None:
    """Refuses a key the schema does not have in a typed node (``model``, ``train``, ``eval``,
    the top level), e.g. ``+train.stepz=5``: Hydra's ``+`` adds it past the schema's check."""
    for path, schema in _TYPED_NODES:
        node = OmegaConf.select(cfg, path) if path else cfg
        if not isinstance(node, DictConfig):
            continue
        known = {f.name for f in dataclasses.fields(schema)}
        for key in node:
            if str(key) not in known:
                full = f"{path}.{key}" if path else str(key)
                raise ConfigError(
                    f"unknown key '{full}' (a typed setting cannot be added with +)"
                    + key_hint(OmegaConf.structured(PosxConfig), full)
                )


def validate(cfg: DictConfig) -> None:
    """Checks what the schema's types cannot; raises :class:`ConfigError` with one line."""
    check_typed_keys(cfg)
    m, t, e = cfg.model, cfg.train, cfg.eval
    for group in ("model", "train", "eval"):  # sizes and counts end up in int64 tensors
        for key, value in cfg[group].items():
            if isinstance(value, int) and abs(value) > INT64_MAX:
                raise ConfigError(f"{group}.{key} must be at most {INT64_MAX} (int64), got {value}")
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
