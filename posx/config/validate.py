"""Checks on a composed config that its schema's types cannot express, each a one-line
:class:`~posx.errors.ConfigError` naming the key and what is allowed."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from posx.config.hints import key_hint
from posx.config.run_names import LABEL_RE
from posx.config.schema import TYPED_NODES, PosxConfig
from posx.errors import ConfigError
from posx.model.rules import check_kernel, head_dim
from posx.runtime.precision import PRECISIONS

INT64_MAX = 2**63 - 1


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
    for path, schema in TYPED_NODES:
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
    """Checks what the schema's types cannot; raises :class:`ConfigError` with one line.

    The checks run in this order, and the first that fails is the error.
    """
    check_typed_keys(cfg)
    _check_int64(cfg)
    _check_model_sizes(cfg.model)
    _check_train_schedule(cfg.train)
    _check_execution(cfg.model, cfg.train, cfg.eval)
    _check_eval(cfg.eval, cfg.train.length)
    _check_names(cfg)
    _check_search_record(cfg)
    _check_targets(cfg)


def _check_int64(cfg: DictConfig) -> None:
    """Sizes and counts in ``model``, ``train`` and ``eval`` end up in int64 tensors."""
    for group in ("model", "train", "eval"):
        for key, value in cfg[group].items():
            if isinstance(value, int) and abs(value) > INT64_MAX:
                raise ConfigError(f"{group}.{key} must be at most {INT64_MAX} (int64), got {value}")


def _check_model_sizes(m: DictConfig) -> None:
    """Positive sizes, and heads that divide the width (the rule is the model's: head_dim)."""
    for name in ("d_model", "n_layers", "n_heads", "d_ff", "attn_block_size"):
        if m[name] <= 0:
            raise ConfigError(f"model.{name} must be positive, got {m[name]}")
    _as_config_error(head_dim, m.d_model, m.n_heads, prefix="model.")


def _check_train_schedule(t: DictConfig) -> None:
    """Lengths, steps, batch, learning rate, warmup, checkpoint and logging intervals."""
    for name in ("length", "steps", "batch_size", "log_every"):
        if t[name] <= 0:
            raise ConfigError(f"train.{name} must be positive, got {t[name]}")
    if not 0 < t.lr <= 1e38 or not 0 <= t.min_lr_ratio <= 1:  # 1e38: float32 range
        raise ConfigError(
            f"train.lr must be in (0, 1e38] and train.min_lr_ratio in [0, 1], "
            f"got {t.lr}, {t.min_lr_ratio}"
        )
    if not t.progress_every >= 0:
        raise ConfigError(f"train.progress_every must be >= 0 seconds, got {t.progress_every}")
    if t.warmup_steps < 0 or t.checkpoint_every < 0 or t.threads < 0:
        raise ConfigError(
            "train.warmup_steps, train.checkpoint_every and train.threads must be >= 0"
        )


def _check_execution(m: DictConfig, t: DictConfig, e: DictConfig) -> None:
    """How the run computes: precisions, attention kernel (the rule is the model's:
    check_kernel), device."""
    for name, value in (("train.precision", t.precision), ("eval.precision", e.precision)):
        if value not in PRECISIONS:
            raise ConfigError(f"{name} must be one of {', '.join(PRECISIONS)}, got {value!r}")
    _as_config_error(check_kernel, m.attention_kernel, prefix="model.")
    if t.device not in ("auto", "cpu", "cuda", "mps") and not t.device.startswith("cuda:"):
        raise ConfigError(f"train.device must be auto, cpu, cuda, cuda:N or mps, got {t.device!r}")


def _check_eval(e: DictConfig, train_length: int) -> None:
    """Lengths, token budgets, the protocol (mode, window, stride, buckets) and variants."""
    if e.lengths is not None:
        positive_lengths(list(e.lengths), "eval.lengths")
    if e.tokens <= 0 or e.batch_tokens <= 0:
        raise ConfigError(
            f"eval.tokens and eval.batch_tokens must be positive, got {e.tokens}, {e.batch_tokens}"
        )
    validate_protocol(e, train_length)
    check_variant_lists(list(e.get("variants") or []))


def _check_names(cfg: DictConfig) -> None:
    """``experiment_name`` and ``label`` become file and directory names."""
    if cfg.get("experiment_name") and not LABEL_RE.fullmatch(str(cfg.experiment_name)):
        raise ConfigError(
            f"experiment_name must be letters, digits, '_', '.' or '-' (it names a claims "
            f"file), got {cfg.experiment_name!r}"
        )
    if cfg.get("label") and not LABEL_RE.fullmatch(str(cfg.label)):
        raise ConfigError(
            f"label must be letters, digits, '_', '.' or '-' (it names directories), "
            f"got {cfg.label!r}"
        )


def _check_search_record(cfg: DictConfig) -> None:
    """``extend.longrope.searched`` says that ``posx extend`` found an extension's factors (its
    identity then holds the search's settings, not the factors): refused on any other run, where
    it would hide hand-set factors from the identity."""
    if not OmegaConf.select(cfg, "extend.longrope.searched", default=False):
        return
    scaling = OmegaConf.select(cfg, "encoding.scaling")
    found = (
        isinstance(scaling, DictConfig)
        and scaling.get("type") == "longrope"
        and bool(scaling.get("factors"))
    )
    if not OmegaConf.select(cfg, "extend.parent", default=None) or not found:
        raise ConfigError(
            "extend.longrope.searched is set by posx extend RUN extension=longrope alongside the "
            "factors its search found; leave it unset (hand-set encoding.scaling.factors stay "
            "in the run's identity)"
        )


def _check_targets(cfg: DictConfig) -> None:
    """The encoding and the task are built from their ``_target_``."""
    for group in ("encoding", "task"):
        node = cfg.get(group)
        if not isinstance(node, DictConfig) or "_target_" not in node:
            raise ConfigError(f"{group} config needs a _target_ (choose one with {group}=NAME)")


def _as_config_error(rule: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Runs one of the model's rules on config values; its ValueError as a ConfigError."""
    try:
        rule(*args, **kwargs)
    except ValueError as err:
        raise ConfigError(str(err)) from err


def check_variant_lists(variants: list[Any]) -> None:
    """``eval.variants``: lists of ``key=value`` overrides, none of them setting the variants."""
    for variant in variants:
        items = list(variant) if not isinstance(variant, str) else [variant]
        if isinstance(variant, str) or not items:
            raise ConfigError(
                f"eval.variants must be lists of key=value overrides, e.g. "
                f"[[encoding.scaling.type=yarn, encoding.scaling.factor=4]]; got {variant!r}"
            )
        for item in items:
            key = str(item).split("=", 1)[0].lstrip("+~")
            if "=" not in str(item) or not key or key.startswith(("eval.variants", "hydra")):
                raise ConfigError(
                    f"eval.variants entry {str(item)!r} must be a key=value override of the "
                    "run's config (not of eval.variants or hydra)"
                )


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


def parse_buckets(spec: str | int) -> str | int:
    """``"log"`` or a positive bucket width; a :class:`ConfigError` otherwise."""
    text = str(spec).strip().lower()
    if text == "log":
        return "log"
    try:
        width = int(text)
    except ValueError:
        width = 0
    if width <= 0:
        raise ConfigError(f"eval buckets must be 'log' or a positive width in tokens, got {spec!r}")
    return width
