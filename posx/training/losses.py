"""The training loss: cross-entropy over the tokens a task scores."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from posx.tasks.base import Batch


def masked_loss(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Mean cross-entropy (nats per token, float32) over the targets where ``batch.mask`` holds.

    Args:
        logits: ``[b, s, V]`` (any float dtype; the loss is computed in float32).
        batch: ``targets`` and ``mask``, ``[b, s]``.

    Returns:
        A scalar; NaN when no target is scored.
    """
    targets = batch.targets.masked_fill(~batch.mask, -100)
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100)
