"""Model code: the decoder-only LM and its attention kernel choice.

The names below are imported when first used, so that :mod:`posx.model.rules` (what config
validation asks) is read without torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from posx.kernels.bias import blocked_bias_attention
    from posx.model.attention import causal_attention
    from posx.model.transformer import TransformerLM

_HOMES = {
    "TransformerLM": "posx.model.transformer",
    "blocked_bias_attention": "posx.kernels.bias",
    "causal_attention": "posx.model.attention",
}
__all__ = ["TransformerLM", "blocked_bias_attention", "causal_attention"]


def __getattr__(name: str) -> Any:
    """``posx.model.NAME`` from its module, imported on first use."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
