"""Inference-time RoPE scaling: new rotary frequencies for a model trained at ``L`` tokens.

Each method maps the trained inverse frequencies ``theta_j = base^(-2j/d)`` (``j < d/2``, ``d``
the rotary width) to new ones, and some add an attention temperature:

- ``linear`` (position interpolation, Chen et al. 2023): ``theta_j / s``.
- ``ntk`` ("NTK-aware", bloc97 2023): ``base' = base * s^(d / (d - 2))``.
- ``dynamic_ntk`` (emozilla 2023): ``base' = base * (s T / L - (s - 1))^(d / (d - 2))`` for a
  sequence of ``T > L`` tokens, the trained frequencies otherwise.
- ``yarn`` (Peng et al. 2023): frequencies with fewer than ``beta_slow`` turns over ``L`` are
  interpolated, those with more than ``beta_fast`` kept, with a linear ramp over the dimension
  index between; q and k are both scaled by ``0.1 ln s + 1``.
- ``llama3`` (Meta 2024): wavelengths above ``L / low_freq_factor`` interpolated, below
  ``L / high_freq_factor`` kept, a smooth blend between.
- ``rerope`` (Su 2023): exact relative positions inside a window ``w``, ``w`` beyond it; this
  changes the attention scores, not the frequencies (see :meth:`posx.encodings.rope.RoPE.attend`).
- ``selfextend`` (Jin et al. 2024): exact relative positions inside a neighbour window ``w``,
  positions divided by the group size ``G`` (``factor``) beyond it; also the scores, not the
  frequencies (:mod:`posx.kernels.self_extend`).
- ``longrope`` (Ding et al. 2024): ``theta_j / lambda_j`` with per-dimension ``factors``
  ``lambda`` (found by :mod:`posx.evaluation.longrope_search`); q and k scaled by
  ``sqrt(1 + ln s / ln L)``, ``transformers``' default for ``rope_type: longrope``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posx.encodings.base import exact_dtype

SCALING_TYPES = (
    "none",
    "linear",
    "ntk",
    "dynamic_ntk",
    "yarn",
    "llama3",
    "rerope",
    "selfextend",
    "longrope",
)


@dataclass(frozen=True)
class RopeScaling:
    """Which inference-time scaling a RoPE applies, with its parameters.

    Attributes:
        type: One of :data:`SCALING_TYPES`.
        factor: Scale ``s`` (the intended context extension; ``ntk``'s ``alpha``; Self-Extend's
            group size ``G``, a whole number).
        original_length: Trained context ``L``; ``None`` until resolved to the training length.
        beta_fast: YaRN: frequencies turning more often than this over ``L`` are kept.
        beta_slow: YaRN: frequencies turning less often than this over ``L`` are interpolated.
        low_freq_factor: llama3: wavelengths above ``L / low_freq_factor`` are interpolated.
        high_freq_factor: llama3: wavelengths below ``L / high_freq_factor`` are kept.
        window: ReRoPE's window ``w``, Self-Extend's neighbour window; ``None`` means
            ``original_length // 2``.
        factors: LongRoPE's per-dimension factors ``lambda [d/2]``.
    """

    type: str = "none"
    factor: float = 1.0
    original_length: int | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    window: int | None = None
    factors: tuple[float, ...] | None = None

    @classmethod
    def from_config(
        cls, node: RopeScaling | Mapping[str, Any] | None, train_length: int | None = None
    ) -> RopeScaling:
        """Builds and validates a scaling from a config mapping (or passes one through).

        Args:
            node: ``None`` (no scaling), a ``RopeScaling`` or a mapping of its fields.
            train_length: Fills ``original_length`` when the config leaves it ``None``.

        Raises:
            ValueError: An unknown key, an unknown type or an impossible parameter.
        """
        if node is None:
            made = cls()
        elif isinstance(node, RopeScaling):
            made = node
        else:
            fields = {f.name for f in dataclasses.fields(cls)}
            unknown = sorted(str(k) for k in node if k not in fields)
            if unknown:
                raise ValueError(
                    f"RoPE scaling has no parameter {unknown[0]!r}; it takes: {', '.join(fields)}"
                )
            values = {str(k): v for k, v in node.items()}
            if isinstance(values.get("factors"), Sequence) and not isinstance(
                values["factors"], str
            ):
                values["factors"] = tuple(values["factors"])
            made = cls(**values)
        if made.original_length is None and train_length is not None:
            made = dataclasses.replace(made, original_length=int(train_length))
        made.validate()
        return made

    def validate(self) -> None:
        """Refuses a setting of the wrong type (``factor=four``), whatever the type, so that
        a scaling that is off never carries a value no scaling could use; then the type's own
        rules.

        Raises:
            ValueError: One line naming the setting, its value and what it takes.
        """
        self._check_types()
        if self.type not in SCALING_TYPES:
            raise ValueError(
                f"unknown RoPE scaling type {self.type!r}; choose from {', '.join(SCALING_TYPES)}"
            )
        if self.type == "none":
            return
        if self.original_length is None or self.original_length <= 0:
            raise ValueError(
                f"RoPE scaling {self.type!r} needs a positive original_length "
                f"(the training length), got {self.original_length}"
            )
        if self.type != "rerope" and not self.factor >= 1.0:
            raise ValueError(f"RoPE scaling factor must be >= 1, got {self.factor}")
        if self.type == "yarn" and not self.beta_fast > self.beta_slow > 0:
            raise ValueError(
                f"YaRN needs beta_fast > beta_slow > 0, got {self.beta_fast} and {self.beta_slow}"
            )
        if self.type == "llama3" and not self.high_freq_factor > self.low_freq_factor > 0:
            raise ValueError(
                "llama3 scaling needs high_freq_factor > low_freq_factor > 0, got "
                f"{self.high_freq_factor} and {self.low_freq_factor}"
            )
        if self.type == "rerope" and self.rerope_window < 1:
            raise ValueError(f"ReRoPE window must be >= 1, got {self.rerope_window}")
        if self.type == "selfextend":
            if not float(self.factor).is_integer():
                raise ValueError(
                    f"Self-Extend's group size (factor) must be a whole number, got {self.factor}"
                )
            if self.rerope_window < 1:
                raise ValueError(f"Self-Extend's window must be >= 1, got {self.rerope_window}")
        if self.type == "longrope" and not self.factors:
            raise ValueError("LongRoPE scaling needs its per-dimension factors (scaling.factors)")

    def _check_types(self) -> None:
        if not isinstance(self.type, str):
            raise ValueError(f"RoPE scaling type must be a name, got {self.type!r}")
        for name in ("factor", "beta_fast", "beta_slow", "low_freq_factor", "high_freq_factor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"RoPE scaling {name} must be a number, got {value!r}")
        if self.factors is not None and (
            not isinstance(self.factors, tuple)
            or not all(
                isinstance(f, int | float) and not isinstance(f, bool) and f > 0
                for f in self.factors
            )
        ):
            raise ValueError(
                f"RoPE scaling factors must be a list of positive numbers, got {self.factors!r}"
            )
        for name in ("original_length", "window"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(
                    f"RoPE scaling {name} must be a whole number or null, got {value!r}"
                )

    @property
    def rerope_window(self) -> int:
        """ReRoPE's window ``w``, Self-Extend's neighbour window (``original_length // 2``
        unless set)."""
        if self.window is not None:
            return int(self.window)
        return max(1, (self.original_length or 0) // 2)

    @property
    def attention_scale(self) -> float:
        """Factor applied to both q and k (YaRN's ``sqrt(1/t) = 0.1 ln s + 1``, LongRoPE's
        ``sqrt(1 + ln s / ln L)``); 1 otherwise."""
        if self.type == "longrope":
            return longrope_attention_scale(self.factor, int(self.original_length or 0))
        return yarn_attention_scale(self.factor) if self.type == "yarn" else 1.0


def ntk_base(base: float, alpha: float, dim: int) -> float:
    """NTK-aware base ``base * alpha^(d / (d - 2))`` for rotary width ``d``."""
    return base * alpha ** (dim / (dim - 2))


def dynamic_ntk_base(base: float, factor: float, seq_len: int, original: int, dim: int) -> float:
    """Dynamic NTK base for a sequence of ``seq_len`` tokens; ``base`` when it fits in ``L``."""
    if seq_len <= original:
        return base
    return base * (factor * seq_len / original - (factor - 1)) ** (dim / (dim - 2))


def yarn_correction_dim(turns: float, dim: int, base: float, original: int) -> float:
    """Dimension index ``j`` whose frequency turns ``turns`` times over ``original`` tokens.

    Solves ``original / (2 pi base^(2j/d)) = turns`` for ``j``.
    """
    return dim * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(base))


def yarn_ramp_range(
    dim: int, base: float, original: int, beta_fast: float = 32.0, beta_slow: float = 1.0
) -> tuple[int, int]:
    """``(low, high)`` dimension indices of YaRN's ramp (floor/ceil, clipped to ``[0, d-1]``)."""
    low = math.floor(yarn_correction_dim(beta_fast, dim, base, original))
    high = math.ceil(yarn_correction_dim(beta_slow, dim, base, original))
    return max(low, 0), min(high, dim - 1)


def yarn_attention_scale(factor: float) -> float:
    """YaRN's ``sqrt(1/t) = 0.1 ln s + 1`` (1 for ``s <= 1``)."""
    return 0.1 * math.log(factor) + 1.0 if factor > 1.0 else 1.0


def longrope_attention_scale(factor: float, original: int) -> float:
    """LongRoPE's ``sqrt(1 + ln s / ln L)`` (1 for ``s <= 1``): ``transformers``' default
    ``attention_factor`` of ``rope_type: longrope``."""
    if factor <= 1.0 or original <= 1:
        return 1.0
    return math.sqrt(1 + math.log(factor) / math.log(original))


def base_inv_freq(
    base: float,
    dim: int,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """Trained inverse frequencies ``base^(-2j/d)`` ``[d/2]`` in ``dtype`` on ``device`` (formed
    in float64; float32 on MPS, which has no float64)."""
    return (base ** (-_even_indices(dim, device) / dim)).to(dtype)


def _even_indices(dim: int, device: torch.device | str | None) -> Tensor:
    """``[0, 2, .., dim - 2]`` in the most exact dtype ``device`` has (``None``: the default
    device, as for any factory)."""
    device = torch.get_default_device() if device is None else torch.device(device)
    return torch.arange(0, dim, 2, dtype=exact_dtype(device), device=device)


def scaled_inv_freq(
    scaling: RopeScaling,
    base: float,
    dim: int,
    seq_len: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """Inverse frequencies ``[d/2]`` under ``scaling``.

    Args:
        scaling: The scaling; ``none``, ``rerope`` and ``selfextend`` keep the trained
            frequencies.
        base: Trained frequency base.
        dim: Rotary width ``d``.
        seq_len: Tokens in the current sequence (only ``dynamic_ntk`` reads it).
        dtype: Result dtype (the computation itself is float64).
        device: Where the result is made (``None``: the default device).

    Returns:
        ``[d/2]`` in ``dtype``.
    """
    kind, s = scaling.type, scaling.factor
    if kind in ("none", "rerope", "selfextend"):
        return base_inv_freq(base, dim, dtype, device)
    original = int(scaling.original_length or 0)
    if kind == "ntk":
        return base_inv_freq(ntk_base(base, s, dim), dim, dtype, device)
    if kind == "dynamic_ntk":
        if seq_len is None:
            raise ValueError("dynamic_ntk scaling needs the sequence length")
        dynamic = dynamic_ntk_base(base, s, seq_len, original, dim)
        return base_inv_freq(dynamic, dim, dtype, device)
    inv = base ** (-_even_indices(dim, device) / dim)
    if kind == "longrope":
        factors = torch.tensor(scaling.factors or (), dtype=inv.dtype, device=inv.device)
        if factors.shape != inv.shape:
            raise ValueError(
                f"LongRoPE needs {inv.shape[0]} factors (half the rotary width {dim}), got "
                f"{factors.shape[0]}"
            )
        return (inv / factors).to(dtype)
    if kind == "linear":
        return (inv / s).to(dtype)
    if kind == "yarn":
        low, high = yarn_ramp_range(dim, base, original, scaling.beta_fast, scaling.beta_slow)
        span = high - low if high > low else 0.001  # avoid 0/0 when both ends coincide
        ramp = ((_even_indices(dim, device) / 2 - low) / span).clamp(0, 1)
        return (inv / s * ramp + inv * (1 - ramp)).to(dtype)
    # llama3
    wavelen = 2 * math.pi / inv
    low_wl = original / scaling.low_freq_factor
    high_wl = original / scaling.high_freq_factor
    smooth = (original / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    blended = (1 - smooth) * inv / s + smooth * inv
    out = torch.where(wavelen > low_wl, inv / s, torch.where(wavelen < high_wl, inv, blended))
    return out.to(dtype)
