"""The positions' unit tests: a spy on the positions the model receives."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def seen_positions(monkeypatch) -> list[torch.Tensor]:
    """Every ``pos`` the model's forward is called with, in order."""
    from posx.model.transformer import TransformerLM

    seen: list[torch.Tensor] = []
    forward = TransformerLM.forward

    def spy(self, tokens, pos=None):
        seen.append(pos)
        return forward(self, tokens, pos)

    monkeypatch.setattr(TransformerLM, "forward", spy)
    return seen
