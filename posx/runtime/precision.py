"""Numeric precision of a run: which autocast (if any) training and evaluation use.

``train.precision`` / ``eval.precision`` take one of :data:`PRECISIONS`; ``auto`` is bf16 on
CUDA and fp32 elsewhere. Autocast applies on any device, so the mixed-precision path a GPU run
takes also runs on the CPU when asked (slowly: what tests want). fp16 needs a gradient scaler
(its small gradients underflow); bf16 has float32's range and needs none.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names resolve without torch: run records and reports read them
    import torch

#: Values of ``train.precision`` and ``eval.precision``.
PRECISIONS = ("auto", "fp32", "bf16", "fp16")

# torch's dtype of each precision by name (None: plain float32)
_DTYPES: dict[str, str | None] = {"fp32": None, "bf16": "bfloat16", "fp16": "float16"}


def resolve_precision(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for ``precision`` on ``device``; ``None`` means plain float32.

    Args:
        precision: One of :data:`PRECISIONS`.
        device: Where the model runs (``auto`` reads its type).

    Raises:
        ValueError: An unknown precision.
    """
    import torch

    name = _DTYPES[precision_name(precision, device)]
    return None if name is None else getattr(torch, name)


def precision_name(precision: str, device: torch.device | str) -> str:
    """What ``precision`` resolves to on ``device``: ``fp32``, ``bf16`` or ``fp16`` (for the
    records, where ``auto`` would not say what ran).

    Args:
        precision: One of :data:`PRECISIONS`.
        device: Where the model runs: a ``torch.device`` or its name (``cuda:1``, ``cpu``).

    Raises:
        ValueError: An unknown precision.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}")
    if precision == "auto":
        kind = device if isinstance(device, str) else device.type
        return "bf16" if kind.split(":")[0] == "cuda" else "fp32"
    return precision


def autocast_context(device: torch.device, precision: str) -> AbstractContextManager[None]:
    """``torch.autocast`` for ``precision`` on ``device`` (disabled for fp32).

    Args:
        device: Where the model runs.
        precision: One of :data:`PRECISIONS`.
    """
    import torch

    dtype = resolve_precision(precision, device)
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler:
    """A gradient scaler, enabled for fp16 only (a disabled one passes steps straight through).

    Args:
        device: Where the model runs.
        precision: One of :data:`PRECISIONS`.
    """
    import torch

    enabled = resolve_precision(precision, device) == torch.float16
    return torch.amp.GradScaler(device.type, enabled=enabled)
