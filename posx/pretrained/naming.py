"""What a pretrained model's run is called and what it was trained for, from its config alone
(no torch, no transformers): the row label, the trained context, the run directory and the
fingerprint. ``posx extend hf:`` names its run with these before anything heavy is imported."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from posx.errors import ConfigError
from posx.pretrained.scaling import describe_scaling, rope_parameters

RUNS_DIR = "pretrained"
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length")


def model_label(name: str, given: str | None) -> str:
    """The row label: ``label=`` or the model's last path part, as a claim can name it (an
    extension's ``+yarn×4+ft@16384`` kept, as posx's own extensions are named)."""
    text = given or Path(name.rstrip("/")).name or name
    text = re.sub(r"[^A-Za-z0-9_.\-+×@]", "-", str(text))
    return text if text[:1].isalpha() else f"m{text}"


def trained_length(config: Any, given: int | None) -> tuple[int, str]:
    """The model's trained context and where it was read: ``train_length=N``; for a config
    carrying a RoPE scaling (``linear``, ``yarn``, ``llama3``) the scaled context (original ×
    factor, or ``max_position_embeddings`` where larger); else ``max_position_embeddings`` (or
    ``n_positions`` ...); a dynamic scaling's original context.

    Raises:
        ConfigError: The config says none and ``train_length=N`` was not given.
    """
    if given:
        return given, "train_length="
    params = rope_parameters(config) or {}
    found = next(((int(getattr(config, k)), k) for k in CONTEXT_KEYS if getattr(config, k, None)),
                 None)  # fmt: skip
    original = params.get("original_max_position_embeddings")
    kind = params.get("rope_type")
    if kind not in (None, "default", "dynamic") and params.get("factor"):
        # a scaled model (a Llama 3.1, posx's own extension) trained at the scaled context:
        # read it from the scaling, so a chain of extensions never shrinks it
        scaled = round(float(original) * float(params["factor"])) if original else 0
        if scaled and (found is None or scaled > found[0]):
            return scaled, f"rope_parameters ({describe_scaling(params)})"
    elif original:  # dynamic NTK is applied at eval time; it trained at the original
        return int(original), "original_max_position_embeddings"
    if found is not None:
        return found
    raise ConfigError(
        f"the config of {config.model_type} names no trained context length; give it as "
        "train_length=N"
    )


def run_directory(root: Path, label: str, revision: str) -> Path:
    """``<root>/pretrained/<label>_<12 hex of the revision>``."""
    short = re.sub(r"[^0-9a-f]", "", revision.split(":")[-1].lower())[:12] or "local"
    return root / RUNS_DIR / f"{label}_{short}"


def model_fingerprint(revision: str, tokenizer_sha256: str) -> str:
    """A pretrained model's configuration: its revision and its tokenizer's definition."""
    return hashlib.sha256(f"{revision}|{tokenizer_sha256}".encode()).hexdigest()[:16]
