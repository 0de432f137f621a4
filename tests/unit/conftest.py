"""Shared fixtures for the unit tests: tiny models composed from the real Hydra configs."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from posx.build import build_model
from posx.launch import compose_config
from posx.model.transformer import TransformerLM

TINY = ["model.d_model=32", "model.n_heads=4", "model.n_layers=2", "train.length=16"]
VOCAB = 50


def tiny_model(encoding: str, *extra: str) -> TransformerLM:
    """A 2-layer, d_model 32 model with ``encoding``, trained length 16, in eval mode."""
    cfg = compose_config([f"encoding={encoding}", *TINY, *extra])
    return build_model(cfg, vocab_size=VOCAB).eval()


@pytest.fixture(scope="session")
def make_tiny_model() -> Callable[..., TransformerLM]:
    return tiny_model
