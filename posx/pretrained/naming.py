"""What a pretrained model's run is called and what it was trained for, from its config alone
(no torch, no transformers): the row label, the trained context, the run directory and the
fingerprint. ``posx extend hf:`` names its run with these before anything heavy is imported."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from posx.errors import ConfigError
from posx.pretrained.scaling import rope_parameters

RUNS_DIR = "pretrained"


def model_label(name: str, given: str | None) -> str:
    """The row label: ``label=`` or the model's last path part, as a claim can name it (an
    extension's ``+yarn×4+ft@16384`` kept, as posx's own extensions are named)."""
    text = given or Path(name.rstrip("/")).name or name
    text = re.sub(r"[^A-Za-z0-9_.\-+×@]", "-", str(text))
    return text if text[:1].isalpha() else f"m{text}"


def trained_length(config: Any, given: int | None) -> tuple[int, str]:
    """The model's trained context and where it was read.

    Raises:
        ConfigError: The config says none and ``train_length=N`` was not given.
    """
    if given:
        return given, "train_length="
    params = rope_parameters(config) or {}
    if params.get("original_max_position_embeddings"):
        return int(params["original_max_position_embeddings"]), "original_max_position_embeddings"
    for key in ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length"):
        if getattr(config, key, None):
            return int(getattr(config, key)), key
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
