"""Model code: the decoder-only LM and its attention kernel choice."""

from posx.kernels.bias import blocked_bias_attention
from posx.model.attention import causal_attention
from posx.model.transformer import TransformerLM

__all__ = ["TransformerLM", "blocked_bias_attention", "causal_attention"]
