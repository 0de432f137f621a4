"""The only place that turns config into objects: task, encoding, model."""

from __future__ import annotations

import importlib
import inspect
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from posx.errors import ConfigError, PosxError

if TYPE_CHECKING:  # torch's classes, imported where an object is built: configs alone need none
    from posx.encodings.base import PositionalEncoding
    from posx.model.transformer import TransformerLM
    from posx.positions import PositionStrategy
    from posx.tasks.base import Task

TOKENIZER_CACHE = ".tokenizer_cache"


def _root_cause(err: BaseException) -> BaseException:
    while err.__cause__ is not None:
        err = err.__cause__
    return err


def locate(path: str) -> Any:
    """The object a dotted ``_target_`` path names: the longest importable module prefix, then
    attributes.

    ``hydra.utils.get_object`` does the same but logs every failure at ERROR.
    """
    parts = path.split(".")
    if not path or not all(parts):
        raise ImportError(f"not a dotted path: {path!r}")
    missing: ModuleNotFoundError | None = None
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as err:
            # `name` or a parent of it is no module (`pathlib.Path.touch`): cut further. Any
            # other missing module is one that an existing module imports: a real error.
            if not err.name or not (name == err.name or name.startswith(err.name + ".")):
                raise
            missing = err
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    assert missing is not None
    raise missing


def check_arguments(node: DictConfig, what: str) -> None:
    """Names a config key the target's constructor does not take (a typo, most often)."""
    try:
        target = locate(node._target_)
        params = inspect.signature(target).parameters
    except Exception as err:  # unknown class, or nothing to inspect
        cause = str(_root_cause(err)).strip().splitlines()[0]
        raise ConfigError(
            f"{what} _target_ {node.get('_target_')!r} cannot be loaded: {cause}"
        ) from err
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        for key in node:
            if not str(key).startswith("_") and key not in params:
                allowed = ", ".join(k for k in params if k != "self")
                raise ConfigError(
                    f"{what} {node._target_} has no parameter {key!r}; it takes: {allowed}"
                )
    check_types(node, what, target)


# What a setting of a plain type must be, in the words of the refusal.
_PLAIN = {bool: "true or false", int: "a whole number", float: "a number", str: "text"}


def _fits(value: Any, kind: type) -> bool:
    if kind is float:  # an integer is a number; true is not
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def check_types(node: DictConfig, what: str, target: Any) -> None:
    """Refuses a setting whose value is not of the plain type (number, whole number, text, true
    or false) its constructor declares, before the class sees it: ``encoding.base=abc`` would
    otherwise fail deep inside it as ``'<=' not supported``, or not at all. A setting whose
    declared type is not plain (a mapping, a union with another class) is the class's own to
    check, as is ``null``.

    Raises:
        ConfigError: One line naming the setting, what it must be and the value given.
    """
    try:
        hints = typing.get_type_hints(target.__init__ if inspect.isclass(target) else target)
    except Exception:  # noqa: BLE001 - annotations that cannot be resolved: nothing to check
        return
    for key in node:
        if str(key).startswith("_") or key not in hints:
            continue
        try:
            value = node[key]  # interpolations resolved, as the class will get it
        except Exception:  # noqa: BLE001 - unresolvable: building says so in its own words
            continue
        if value is None or OmegaConf.is_config(value):
            continue
        hint = hints[key]
        kinds = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        kinds = tuple(k for k in kinds if k is not type(None))
        if not kinds or not all(k in _PLAIN for k in kinds):
            continue
        if not any(_fits(value, k) for k in kinds):
            must = " or ".join(dict.fromkeys(_PLAIN[k] for k in kinds))
            raise ConfigError(f"{what}.{key} must be {must}, got {value!r}")


def _instantiate(node: DictConfig, what: str, **kwargs: Any) -> Any:
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    check_arguments(node, what)
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        cause = _root_cause(err)
        if isinstance(cause, PosxError):
            raise cause from err
        msg = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        raise ConfigError(f"cannot build {what} ({node.get('_target_')}): {msg}") from err


def model_dims(cfg: DictConfig) -> dict[str, int]:
    """What an encoding may need to know about the model it sits in."""
    m = cfg.model
    return {
        "d_model": m.d_model,
        "n_heads": m.n_heads,
        "head_dim": m.d_model // m.n_heads,
        "n_layers": m.n_layers,
        # the length the positions were first trained at: an extension (posx extend) keeps
        # its first ancestor's, so RoPE's scaling.original_length means the same in both
        "train_length": OmegaConf.select(cfg, "extend.base_length") or cfg.train.length,
    }


def build_task(cfg: DictConfig, root: Path | None = None) -> Task:
    """Instantiates ``cfg.task``. A task that takes ``cache_dir`` (text: trained tokenizers)
    gets ``<root>/.tokenizer_cache`` unless its config sets one; ``root`` defaults to
    ``cfg.root``, the results root."""
    from posx.tasks.base import Task

    check_arguments(cfg.task, "task")
    takes_cache = "cache_dir" in inspect.signature(locate(cfg.task._target_)).parameters
    extra = {}
    if takes_cache and cfg.task.get("cache_dir") is None:
        extra["cache_dir"] = str(Path(root if root is not None else cfg.root) / TOKENIZER_CACHE)
    task = _instantiate(cfg.task, "task", **extra)
    if not isinstance(task, Task):
        raise ConfigError(f"task _target_ {cfg.task._target_} does not build a posx Task")
    return task


def dims_needed(node: DictConfig, dims: dict[str, int]) -> list[str]:
    """The model dims (``n_heads``, ...) the node's class requires and the node does not set:
    posx passes them only to a ``_partial_`` factory. Empty when the class cannot be loaded
    (instantiating reports that)."""
    try:
        params = inspect.signature(locate(node._target_)).parameters
    except Exception:  # not loadable or not inspectable: the builder's error says which
        return []
    return [
        k
        for k, p in params.items()
        if k in dims and k not in node and p.default is inspect.Parameter.empty
    ]


def build_encoding(cfg: DictConfig) -> PositionalEncoding:
    """Instantiates ``cfg.encoding``; a ``_partial_`` factory gets the model dims it asks for.

    Only the arguments the constructor names are passed, so an encoding declares its needs
    (``head_dim``, ``n_heads``, ...) by its signature, and the yaml carries the rest.
    """
    from posx.encodings.base import PositionalEncoding

    needed = [] if cfg.encoding.get("_partial_") else dims_needed(cfg.encoding, model_dims(cfg))
    if needed:
        raise ConfigError(
            f"encoding {cfg.encoding._target_} needs {', '.join(needed)} from the model, which "
            "posx passes to a partial only: add `_partial_: true` to its yaml (or, on the "
            "command line, encoding=nope encoding._target_=... +encoding._partial_=true)"
        )
    made = _instantiate(cfg.encoding, "encoding")
    if not isinstance(made, PositionalEncoding) and callable(made):
        params = inspect.signature(made).parameters
        given = set(getattr(made, "keywords", {}) or {})
        dims = {k: v for k, v in model_dims(cfg).items() if k in params and k not in given}
        if "train_positions" in params and "train_positions" not in given:
            dims["train_positions"] = train_positions(cfg)
        try:
            made = made(**dims)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"cannot build encoding ({cfg.encoding._target_}): {err}") from err
    if not isinstance(made, PositionalEncoding):
        raise ConfigError(
            f"encoding _target_ {cfg.encoding._target_} does not build a PositionalEncoding"
        )
    return made


def train_positions(cfg: DictConfig) -> int:
    """How many positions a learned table gets by default: the positions a training sequence
    reaches (its tokens, or a structured strategy's IDs: :meth:`PositionStrategy.positions_needed`),
    and at least its tokens, the size tables were saved with before IDs were counted (their
    checkpoints keep loading); built only for an encoding that asks."""
    length, task = int(cfg.train.length), build_task(cfg)
    tokens = task.tokens_for(length)
    return max(tokens, build_positions(cfg).positions_needed(tokens, task.longest_number(length)))


def build_model(cfg: DictConfig, vocab_size: int) -> TransformerLM:
    """The :class:`TransformerLM` of ``cfg.model`` with the encoding of ``cfg.encoding``.

    Args:
        cfg: The run's config.
        vocab_size: Number of token ids (the task's).

    Raises:
        ConfigError: The encoding cannot be built, or the model's settings are inconsistent
            (``d_model`` not divisible by ``n_heads``, an unknown attention kernel).
    """
    from posx.model.transformer import TransformerLM

    m = OmegaConf.to_container(cfg.model, resolve=True)
    assert isinstance(m, dict)
    try:
        return TransformerLM(vocab_size=vocab_size, encoding=build_encoding(cfg), **m)
    except ValueError as err:
        raise ConfigError(str(err)) from err


def build_positions(cfg: DictConfig) -> PositionStrategy:
    """The run's training-time position strategy (``default`` when the config has none, as in
    runs made before the ``positions`` group existed)."""
    from posx.positions import PositionStrategy

    node = cfg.get("positions")
    if node is None:
        return PositionStrategy()
    made = _instantiate(node, "positions")
    if not isinstance(made, PositionStrategy):
        raise ConfigError(
            f"positions _target_ {node.get('_target_')} does not build a posx PositionStrategy"
        )
    return made
