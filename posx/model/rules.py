"""The model's rules on its settings, without torch: which attention kernels exist and how
wide a head is. Config validation (``posx show-config``, a mistyped override) asks them before
any model is built, so they import nothing heavy; :mod:`posx.model.attention` and
:mod:`posx.model.transformer` use the same functions."""

from __future__ import annotations

#: Values of ``attention_kernel``: which kernel a bias encoding gets, and whether an encoding
#: that computes attention itself takes its FlexAttention route (``flex`` only).
KERNELS = ("auto", "blocked", "flex")


def check_kernel(kernel: str, prefix: str = "") -> str:
    """``kernel`` when it is one of :data:`KERNELS`; the one home of that rule.

    Args:
        kernel: An ``attention_kernel`` value.
        prefix: Put before the setting's name in the message (``"model."`` for the config).

    Raises:
        ValueError: ``attention_kernel must be one of auto, blocked, flex, got 'x'``.
    """
    if kernel not in KERNELS:
        raise ValueError(
            f"{prefix}attention_kernel must be one of {', '.join(KERNELS)}, got {kernel!r}"
        )
    return kernel


def head_dim(d_model: int, n_heads: int, prefix: str = "") -> int:
    """The width of one attention head; the one home of the rule that ``n_heads`` divides
    ``d_model``.

    Args:
        d_model: Residual width.
        n_heads: Attention heads.
        prefix: Put before the settings' names in the message (``"model."`` for the config).

    Raises:
        ValueError: ``d_model (30) must be divisible by n_heads (4)``.
    """
    if d_model % n_heads:
        raise ValueError(
            f"{prefix}d_model ({d_model}) must be divisible by {prefix}n_heads ({n_heads})"
        )
    return d_model // n_heads
