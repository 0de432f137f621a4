"""Config composition (Hydra, with the user's config dirs) and validation of what the typed
schemas (:mod:`posx.config.schema`) cannot check: one-line errors for every bad value."""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import re
import secrets
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posx.config.build import locate, model_dims
from posx.config.paths import (
    CONFIG_DIR,
    GROUPS,
    choices,
    dirs_of_searchpath,
    options,
    searchpath_override,
    user_config_dirs,
)
from posx.config.run_names import LABEL_RE, run_name_resolver
from posx.config.schema import TYPED_NODES, PosxConfig
from posx.errors import ConfigError
from posx.model.attention import check_kernel
from posx.model.transformer import head_dim
from posx.runtime.precision import PRECISIONS

INT64_MAX = 2**63 - 1


def new_invocation() -> str:
    """``YYYYmmdd-HHMMSS_<6 hex digits>``: unique per ``posx train`` invocation, also for two
    started in the same second."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}_{secrets.token_hex(3)}"


def register() -> None:
    """Registers the schema and the ``posx_run_name`` resolver (idempotent). Called by whatever
    composes a config, never at import time."""
    ConfigStore.instance().store(name="posx_schema", node=PosxConfig)
    if not OmegaConf.has_resolver("posx_run_name"):
        OmegaConf.register_new_resolver("posx_run_name", run_name_resolver)


def one_line(err: BaseException) -> str:
    """The first line of an error and of its root cause, joined (Hydra wraps the cause)."""
    parts: list[str] = []
    while err is not None:
        text = str(err).strip().splitlines()[0].rstrip(".") if str(err).strip() else ""
        if text and not any(text in p for p in parts):  # a cause the message already quotes
            parts.append(text)
        err = err.__cause__  # type: ignore[assignment]
    return ": ".join(parts[:1] + parts[-1:]) if len(parts) > 1 else (parts[0] if parts else "error")


def split_searchpath(overrides: Sequence[str]) -> tuple[list[Path], list[str]]:
    """The directories of a ``hydra.searchpath=[...]`` override, and the other overrides (posx
    adds the user's dirs itself, so that it also knows their options)."""
    dirs: list[Path] = []
    rest = []
    for o in overrides:
        if o.split("=", 1)[0].lstrip("+~") != "hydra.searchpath":
            rest.append(o)
            continue
        try:
            value = OverridesParser.create().parse_override(o).value()
        except HydraException as err:
            raise ConfigError(f"bad override: {one_line(err)}") from err
        dirs += dirs_of_searchpath(value if isinstance(value, list) else [value])
    return dirs, rest


def config_dirs(
    dirs: Sequence[Path] | None, overrides: Sequence[str]
) -> tuple[list[Path], list[str]]:
    """The user's config dirs (``dirs``, default: the environment's, plus a
    ``hydra.searchpath`` override's) and the overrides without that one."""
    extra, rest = split_searchpath(overrides)
    base = user_config_dirs() if dirs is None else list(dirs)
    return (user_config_dirs([*base, *extra], env=False) if extra else base), rest


def compose(
    overrides: Sequence[str], dirs: Sequence[Path] | None = None, hydra_node: bool = False
) -> DictConfig:
    """The config ``posx train OVERRIDES`` would run with; bad overrides raise ConfigError.

    Args:
        overrides: Hydra overrides (``encoding=alibi``, ``train.steps=5``, ...).
        dirs: The user's config dirs (default: from ``POSX_CONFIG_PATH``), searched after the
            built-in configs.
        hydra_node: Keep Hydra's own node (``cfg.hydra``: choices, search path, run dir).
    """
    register()
    dirs, rest = config_dirs(dirs, overrides)
    full = [*rest, *searchpath_override(dirs)]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        try:
            return hydra_compose(
                config_name="config", overrides=full, return_hydra_config=hydra_node
            )
        except (HydraException, OmegaConfBaseException, ValueError) as err:
            raise _override_error(err, full) from err


class ListValueError(ConfigError):
    """A single value for a list setting (``eval.lengths=32``, or each value of the sweep
    ``eval.lengths=32,64``); ``key`` names the setting, so that a caller that has the user's
    own line can name the fix."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


def _override_error(err: BaseException, overrides: list[str]) -> ConfigError:
    """Hydra's error for a config that cannot be composed, in posx's words: an unknown option,
    an unknown setting (what there is), a single value for a list; else its first line."""
    text, cause = str(err), err.__cause__
    while cause is not None:  # Hydra wraps OmegaConf's error, which names the type
        text, cause = f"{text}: {cause}", cause.__cause__
    merged = re.search(r"Error merging override ([^=\s]+)=(.*?)(?::\s|$)", text)
    if merged and "is not a ListConfig" in text:
        key, value = merged[1].lstrip("+~"), merged[2]
        return ListValueError(f"{key} takes a list: write {key}=[{value}]", key)
    unknown = re.search(r"Could not override '([^']+)'", text)
    hint = _known_keys(unknown[1], overrides) if unknown else ""
    if hint:
        return ConfigError(f"unknown setting '{unknown[1]}'{hint}")
    return ConfigError(_missing_option(err) or one_line(err))


def _missing_option(err: BaseException) -> str:
    """``unknown hydra/launcher 'nosuch'; choose from: basic, joblib, ...`` from Hydra's
    multi-line message for a config group option that does not exist; empty otherwise."""
    text = str(err).split("Config search path")[0]
    found = re.search(r"Could not find '(.+)/([^/']+)'", text)
    choices = re.findall(r"^\t(\S+)$", text, re.MULTILINE)
    if not found or not choices:
        return ""
    return f"unknown {found[1]} '{found[2]}'; choose from: {', '.join(choices)}"


def _known_keys(key: str, overrides: list[str]) -> str:
    """For an override of a key that does not exist: what the config has there (from the
    config composed without that override, see :func:`key_hint`); empty when it cannot say."""
    rest = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != key]
    try:
        return key_hint(hydra_compose(config_name="config", overrides=rest), key)
    except (HydraException, OmegaConfBaseException, ValueError):
        return ""


def _first_missing(cfg: DictConfig, key: str) -> tuple[str, str] | None:
    """The deepest node of ``key`` that exists and the name missing under it:
    ``encoding.scaling.type`` on ALiBi -> ``("encoding", "scaling")``; None when a part of the
    path is a value, not a node."""
    parts = key.lstrip("+~").split(".")
    node: Any = cfg
    for i, part in enumerate(parts):
        if not isinstance(node, DictConfig):
            return None
        if part not in node:
            return ".".join(parts[:i]), part
        node = node[part]
    return None


def key_hint(cfg: DictConfig, key: str) -> str:
    """``; did you mean 'model.d_model'? model keys: ...`` for a ``key`` missing from ``cfg``.

    Under a node that a ``_target_`` class builds it names the class and what it takes, and the
    other options of its group that have the setting: ``; encoding (posx.encodings.alibi.ALiBi)
    has no setting 'scaling'; encoding keys: (none; n_heads comes from the model); encoding
    options with 'scaling': rope``.
    """
    found = _first_missing(cfg, key)
    node = OmegaConf.select(cfg, found[0]) if found and found[0] else cfg
    if found is None or not isinstance(node, DictConfig):
        return ""
    parent, leaf = found
    keys, given = _settings(cfg, node)
    close = difflib.get_close_matches(leaf, keys, n=1)
    hint = f"; did you mean '{parent + '.' if parent else ''}{close[0]}'?" if close else ";"
    listed = ", ".join(keys) or ("none" if given else "(none)")
    if given:
        verb = "comes" if len(given) == 1 else "come"
        listed += f" ({', '.join(given)} {verb} from the model)"
    hint += f" {parent or 'top-level'} keys: {listed}"
    if "_target_" not in node:
        return hint
    return f"; {parent} ({node._target_}) has no setting '{leaf}'{hint}" + _options_with(
        parent, leaf
    )


def _settings(cfg: DictConfig, node: DictConfig) -> tuple[list[str], list[str]]:
    """A node's settings: its keys, then the other arguments its ``_target_`` class takes;
    and the arguments posx passes from the model (an encoding's ``n_heads``, ``head_dim``).

    The class is inspected only when importing it runs no code that was not already run:
    posx's own, or a module already imported (a run directory's target is never imported
    here: see :mod:`posx.config.trust`).
    """
    keys = [str(k) for k in node if not str(k).startswith("_")]
    target = str(node.get("_target_") or "")
    loaded = target.startswith("posx.") or target.rpartition(".")[0] in sys.modules
    if not loaded:
        return keys, []
    try:
        params = inspect.signature(locate(target)).parameters
        dims = set(model_dims(cfg))
    except Exception:  # noqa: BLE001 - nothing to inspect, or a config without a model
        return keys, []
    kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    named = [n for n, p in params.items() if n != "self" and p.kind not in kinds]
    keys += [n for n in named if n not in keys and n not in dims]
    return keys, [n for n in named if n in dims and n not in keys]


def _options_with(group: str, leaf: str) -> str:
    """``; encoding options with 'scaling': rope``: the group's options whose yaml sets
    ``leaf`` (empty when none does, or ``group`` is no config group)."""
    if group not in GROUPS:
        return ""
    having = []
    for name, path in options(group, user_config_dirs()).items():
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(data, dict) and leaf in data:
            having.append(name)
    return f"; {group} options with '{leaf}': {', '.join(having)}" if having else ""


def check_group_value(group: str, value: str, dirs: Sequence[Path] | None = None) -> None:
    """``encoding=rpoe`` fails here, naming the options (built-in and the user's), before
    Hydra's longer message.

    A list selects several options of one group (``logger=[tensorboard,mlflow]``); each is
    checked.
    """
    if group not in GROUPS:
        return
    listed = value.startswith("[") and value.endswith("]")
    names = [v.strip() for v in value[1:-1].split(",") if v.strip()] if listed else [value]
    known = choices(group, dirs)
    for name in names:
        if name not in ("null", "None") and name not in known:
            raise ConfigError(f"unknown {group} '{name}'; choose from: {', '.join(known)}")


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


DEFAULT_EVAL_FACTORS = (1, 2, 4, 8)


def eval_lengths(cfg: DictConfig) -> list[int]:
    """The lengths a run is evaluated at: ``eval.lengths`` when set, else 1x, 2x, 4x and 8x
    ``train.length``."""
    if cfg.eval.get("lengths") is not None:
        return [int(x) for x in cfg.eval.lengths]
    return [f * int(cfg.train.length) for f in DEFAULT_EVAL_FACTORS]


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
