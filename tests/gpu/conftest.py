"""Tests that need a CUDA GPU carry the ``cuda`` marker and skip, saying so, without one.

``make test-gpu`` runs them (``pytest -m cuda``); ``make test`` collects and skips them on a
machine without CUDA, so the default suite excludes nothing silently.
"""

from __future__ import annotations

import pytest
import torch

NO_GPU = (
    "needs a CUDA GPU: torch.cuda.is_available() is False here "
    "(run `make test-gpu` on a GPU machine with a CUDA build of torch)"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=NO_GPU)
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
