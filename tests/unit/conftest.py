"""Shared fixtures for the unit tests: tiny models composed from the real Hydra configs."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch

from posx.config.build import build_model
from posx.model.transformer import TransformerLM
from tests.conftest import composed

TINY = ["model.d_model=32", "model.n_heads=4", "model.n_layers=2", "train.length=16"]
VOCAB = 50


def tiny_model(encoding: str, *extra: str) -> TransformerLM:
    """A 2-layer, d_model 32 model with ``encoding``, trained length 16, in eval mode."""
    cfg = composed([f"encoding={encoding}", *TINY, *extra])
    return build_model(cfg, vocab_size=VOCAB).eval()


@pytest.fixture(scope="session")
def make_tiny_model() -> Callable[..., TransformerLM]:
    return tiny_model


@pytest.fixture(autouse=True, scope="module")
def _single_thread() -> Iterator[None]:
    """Tiny tensors gain nothing from intra-op threads, and on a busy 2-core machine spinning
    worker threads make each forward ~100x slower. Restored after each unit-test module so
    other suites keep their setting."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
