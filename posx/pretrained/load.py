"""Finding and loading a Hugging Face causal LM without running anyone's code.

A model directory is as hostile as a shared run directory. So: ``config.json`` is read here
first, as plain JSON, and a config that asks for custom code (``auto_map``, or a ``model_type``
the installed ``transformers`` does not know) is refused in one line unless the user named this
very model with ``--trust-remote-code``; weights load from safetensors, and pickle-based files
(``pytorch_model.bin``) only through PyTorch's weights-only loader; nothing downloads unless the
user asks (``--allow-download``), and ``HF_HUB_OFFLINE`` still wins then.

``transformers`` is an optional extra, imported here only when a model is loaded.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from posx.errors import ConfigError, PosxError, one_line
from posx.pretrained.hash_cache import Stamp, remember, remembered

if TYPE_CHECKING:  # torch comes with loading: finding a model (a run's name) needs none of it
    import torch

HF_MODEL_PREFIX = "hf:"
EXTRA = "pip install 'posx[transformers]'"
SAFE_WEIGHTS = ("*.safetensors",)
PICKLE_WEIGHTS = ("*.bin", "*.pt", "*.pth")
# Files a snapshot needs: config, tokenizer, weights (never *.py: no code is fetched or run).
SNAPSHOT_FILES = ["*.json", "*.model", "*.txt", "*.tiktoken", *SAFE_WEIGHTS, *PICKLE_WEIGHTS]
HASH_CHUNK = 2**24


def require_transformers(doing: str = "evaluating") -> ModuleType:
    """The ``transformers`` module (``doing``: what the message says needs it).

    Raises:
        ConfigError: It is not installed; the message names the extra.
    """
    try:
        import transformers
    except ImportError as err:
        raise ConfigError(
            f"{doing} a pretrained model needs the transformers library: {EXTRA}"
        ) from err
    transformers.logging.set_verbosity_error()  # its warnings are not posx's one-line errors
    transformers.utils.logging.disable_progress_bar()  # posx prints its own line per length
    return transformers


@dataclass
class Source:
    """Where a model's files are, and what identifies them.

    Attributes:
        name: What the user typed after ``hf:`` (a directory or a hub id).
        path: The local directory holding the files.
        revision: The hub commit hash (a cached snapshot), or ``dir:<sha256 of the files>``.
        config: ``config.json`` as plain data.
        weights: ``safetensors`` or ``pickle`` (loaded weights-only).
    """

    name: str
    path: Path
    revision: str
    config: dict[str, Any] = field(default_factory=dict)
    weights: str = "safetensors"


def model_name(word: str) -> str:
    """``hf:NAME`` -> ``NAME``.

    Raises:
        ConfigError: Nothing after the prefix.
    """
    name = word[len(HF_MODEL_PREFIX) :].strip()
    if not name:
        raise ConfigError(f"{word!r} names no model; write hf:NAME (a hub id) or hf:DIR")
    return name


def directory_hash(path: Path) -> str:
    """SHA-256 over every file of a model directory (names and contents, sorted), so a run
    records exactly which weights and tokenizer it evaluated. Read once while the files stay
    as they are: per process (``posx extend hf:`` names its run, then plans it: one pass over a
    model's gigabytes, not two) and between processes (:mod:`posx.pretrained.hash_cache`)."""
    files = sorted(p for p in path.rglob("*") if p.is_file() and ".cache" not in p.parts)
    stamp = tuple((str(f.relative_to(path)), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    return _hash_files(path, stamp)


@functools.lru_cache(maxsize=8)
def _hash_files(path: Path, stamp: Stamp) -> str:
    """:func:`directory_hash` of the files ``stamp`` names (name, size, modification time)."""
    known = remembered(path, stamp)
    if known is not None:
        return known
    digest = hashlib.sha256()
    for name, _, _ in stamp:
        digest.update(name.encode() + b"\0")
        with open(path / name, "rb") as f:
            while chunk := f.read(HASH_CHUNK):
                digest.update(chunk)
    remember(path, stamp, digest.hexdigest())
    return digest.hexdigest()


def _snapshot(name: str, revision: str | None, allow_download: bool) -> Path:
    """The cached snapshot of hub model ``name`` (downloaded only when allowed and online)."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import (
            GatedRepoError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
        )
    except ImportError as err:
        raise ConfigError(f"loading a model by name needs huggingface_hub: {EXTRA}") from err
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    local_only = offline or not allow_download
    try:
        return Path(
            snapshot_download(
                name, revision=revision, local_files_only=local_only, allow_patterns=SNAPSHOT_FILES
            )
        )
    except GatedRepoError as err:
        raise ConfigError(
            f"model {name} is gated: accept its licence on huggingface.co and log in "
            "(`hf auth login`), then download it"
        ) from err
    except RepositoryNotFoundError as err:
        raise ConfigError(f"model {name} does not exist on the hub (or is private)") from err
    except LocalEntryNotFoundError as err:
        why = "HF_HUB_OFFLINE is set" if offline else "downloads are off"
        hint = "unset HF_HUB_OFFLINE and " if offline else ""
        raise ConfigError(
            f"model {name} is not a directory and not in the local Hugging Face cache ({why}); "
            f"{hint}pass --allow-download, or give hf:DIR of a saved model"
        ) from err
    except Exception as err:  # noqa: BLE001 - the hub raises many types (network, bad repo)
        raise ConfigError(f"cannot get model {name}: {one_line(err)}") from err


def _read_config(path: Path) -> dict[str, Any]:
    file = path / "config.json"
    if not file.is_file():
        raise ConfigError(f"{path} holds no config.json: not a saved Hugging Face model")
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"{file} is damaged ({one_line(err)})") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{file} is damaged (a JSON object was expected)")
    return data


def _weights(path: Path) -> str:
    if any(any(path.glob(pattern)) for pattern in SAFE_WEIGHTS):
        return "safetensors"
    if any(any(path.glob(pattern)) for pattern in PICKLE_WEIGHTS):
        return "pickle"
    raise ConfigError(
        f"{path} holds no weights (no *.safetensors, no pytorch_model.bin); save the model "
        "with save_pretrained, or download its weights"
    )


def find_model(
    word: str, revision: str | None = None, allow_download: bool = False, weights: bool = True
) -> Source:
    """The model ``hf:NAME_OR_DIR`` names: a local directory, else the local cache.

    Args:
        word: ``hf:NAME_OR_DIR``.
        revision: A hub branch, tag or commit (cache only).
        allow_download: Fetch a missing hub model (never when ``HF_HUB_OFFLINE`` is set).
        weights: Refuse a directory without weights (False: a plan made from the config alone,
            ``posx extend hf: --dry-run``; its weight format is ``none``).

    Returns:
        Its files, revision, config and weight format.

    Raises:
        ConfigError: A missing, gated, weight-less or damaged model, in one line.
    """
    name = model_name(word)
    local = Path(name).expanduser()
    if local.is_dir():
        path, rev = local.resolve(), None
    elif local.exists() or name.startswith((".", "/", "~")):
        raise ConfigError(f"{name} is not a directory holding a saved model")
    else:
        path = _snapshot(name, revision, allow_download)
        rev = path.name  # the cache keeps a snapshot in snapshots/<commit hash>/
    config = _read_config(path)
    try:
        found = _weights(path)
    except ConfigError:
        if weights:
            raise
        found = "none"
    return Source(name, path, rev or f"dir:{directory_hash(path)}", config, found)


def check_code(source: Source, trust_remote_code: list[str], known: set[str]) -> bool:
    """Whether the model may run its own code: only when it asks and the user named it.

    Args:
        source: The model.
        trust_remote_code: The names given to ``--trust-remote-code``.
        known: The ``model_type`` values the installed ``transformers`` implements.

    Returns:
        True when the model asks for custom code and the user allowed this model.

    Raises:
        ConfigError: It asks for custom code and was not named.
    """
    asks = _custom_code(source, known)
    if not asks:
        return False
    if source.name in trust_remote_code or str(source.path) in trust_remote_code:
        return True
    raise ConfigError(
        f"model {source.name} asks to run its own code ({asks}); posx never runs a model's code "
        f"unless you allow it: --trust-remote-code {source.name}"
    )


def _custom_code(source: Source, known: set[str]) -> str:
    """What in the model's files asks for custom code, or ``""``."""
    if source.config.get("auto_map"):
        return "auto_map in config.json"
    kind = source.config.get("model_type")
    if kind not in known:
        return f"model_type {kind!r}, which transformers does not implement"
    tok = source.path / "tokenizer_config.json"
    if tok.is_file():
        try:
            data = json.loads(tok.read_text())
        except (OSError, ValueError) as err:
            raise ConfigError(f"{tok} is damaged ({one_line(err)})") from err
        if isinstance(data, dict) and data.get("auto_map"):
            return "auto_map in tokenizer_config.json"
    return ""


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The dtype weights load in: ``auto`` is bf16 on a GPU and fp32 on a CPU.

    Raises:
        ConfigError: An unknown name.
    """
    import torch

    table = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in table:
        raise ConfigError(f"unknown --dtype {dtype!r}; choose from auto, {', '.join(table)}")
    return table[dtype]


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``bf16`` (as ``eval.csv``'s ``precision`` column says it)."""
    import torch

    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


def load_config(source: Source, trust: bool) -> Any:
    """The model's ``transformers`` config object."""
    transformers = require_transformers()
    try:
        return transformers.AutoConfig.from_pretrained(
            str(source.path), local_files_only=True, trust_remote_code=trust
        )
    except Exception as err:  # noqa: BLE001 - transformers raises many types on bad files
        raise ConfigError(f"cannot read the config of {source.name}: {one_line(err)}") from err


def load_model(
    source: Source, config: Any, dtype: torch.dtype, trust: bool, device_map: str | None = None
) -> torch.nn.Module:
    """The causal LM in ``dtype``, in eval mode; weights-only loading of any pickle.

    Args:
        source: The model's files.
        config: Its config (with any change to evaluate).
        dtype: The weights' dtype.
        trust: Whether it may run its own code (:func:`check_code`).
        device_map: ``accelerate``'s device map (``auto`` spreads a model too large for one
            GPU over the machine's GPUs); None: on the CPU, for the caller to move.

    Returns:
        The model.

    Raises:
        PosxError: The weights cannot be loaded (damaged, incompatible).
    """
    transformers = require_transformers()
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(source.path),
            config=config,
            dtype=dtype,
            local_files_only=True,
            trust_remote_code=trust,
            use_safetensors=source.weights == "safetensors",
            weights_only=True,
            device_map=device_map,
        )
    except ValueError as err:  # e.g. a config that is not a causal LM's
        raise ConfigError(f"cannot load {source.name} as a causal LM: {one_line(err)}") from err
    except Exception as err:  # noqa: BLE001 - damaged or incompatible weight files
        raise PosxError(f"cannot load the weights of {source.name}: {one_line(err)}") from err
    return model.eval()


def load_tokenizer(source: Source, trust: bool) -> Any:
    """The model's fast tokenizer (offsets are needed to count bytes exactly).

    Raises:
        ConfigError: No tokenizer, or only a slow one.
    """
    transformers = require_transformers()
    try:
        tok = transformers.AutoTokenizer.from_pretrained(
            str(source.path), local_files_only=True, trust_remote_code=trust
        )
    except Exception as err:  # noqa: BLE001 - missing or damaged tokenizer files
        raise ConfigError(f"cannot load the tokenizer of {source.name}: {one_line(err)}") from err
    if not getattr(tok, "is_fast", False):
        raise ConfigError(
            f"the tokenizer of {source.name} is not a fast tokenizer (no tokenizer.json): posx "
            "counts bytes through a fast tokenizer's offsets"
        )
    return tok


def known_model_types() -> set[str]:
    """Every ``model_type`` the installed ``transformers`` implements."""
    return set(require_transformers().CONFIG_MAPPING.keys())
