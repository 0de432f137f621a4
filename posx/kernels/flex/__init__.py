"""FlexAttention kernels: scores computed inside the fused kernel, never as a full matrix.

Modules: ``attention`` (the compiled call, causal block masks, a ``score_mod`` reading a
per-distance bias table, and why an encoding cannot take FlexAttention), ``mods`` (``score_mod``
s that compute a bias per pair, FIRE's MLP) and ``tables`` (the scores of encodings that compute
attention themselves, as tables a ``score_mod`` indexes).
"""
