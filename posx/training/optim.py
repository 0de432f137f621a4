"""The optimizer and its learning-rate schedule.

Weight decay follows declarations, not tensor shapes: the model's ``nn.Linear`` and
``nn.Embedding`` weights are decayed (norms and biases are not), and every positional encoding
says which of its own parameters are decayed (:meth:`PositionalEncoding.decayed_parameter_names`,
per paper; docs/encodings.md). A rule by rank would decay e.g. learned ALiBi's ``[n_sets, h]``
log-slopes toward slope 1.
"""

from __future__ import annotations

import math

import torch
from omegaconf import DictConfig
from torch import nn

from posx.encodings.base import decayed_layer_weights
from posx.errors import PosxError


def decayed_names(model: nn.Module) -> set[str]:
    """Every name (tied parameters under each of their names) whose parameter takes weight decay.

    Raises:
        PosxError: When an encoding declares a name that is not one of its parameters.
    """
    declared = decayed_layer_weights(model)
    known = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    unknown = sorted(declared - known)
    if unknown:
        raise PosxError(
            f"weight decay is declared for {unknown[0]!r}, which is no parameter of the model; "
            "decayed_parameter_names() must return names from the encoding's named_parameters()"
        )
    return declared


def parameter_groups(model: nn.Module) -> dict[str, list[str]]:
    """Trainable parameter names split into ``decay`` and ``no_decay`` (tied ones named once).

    A parameter shared under several names (tied embeddings) is decayed when any of its owners
    declares it decayed.
    """
    by_name = dict(model.named_parameters(remove_duplicate=False))
    decayed = {id(by_name[name]) for name in decayed_names(model)}
    groups: dict[str, list[str]] = {"decay": [], "no_decay": []}
    for name, p in model.named_parameters():
        if p.requires_grad:
            groups["decay" if id(p) in decayed else "no_decay"].append(name)
    return groups


def make_optimizer(model: nn.Module, cfg: DictConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW with ``train.weight_decay`` on the declared parameters and none on the rest.

    Args:
        model: The model (not a DDP wrapper).
        cfg: Config with ``train.lr``, ``train.weight_decay``, ``train.beta1``, ``train.beta2``.
        device: Where the model lives (fused AdamW on CUDA unless ``train.fused_adamw`` says).

    Returns:
        The optimizer: group 0 decayed, group 1 not.
    """
    names = parameter_groups(model)
    params = dict(model.named_parameters())
    groups = [
        {"params": [params[n] for n in names["decay"]], "weight_decay": cfg.train.weight_decay},
        {"params": [params[n] for n in names["no_decay"]], "weight_decay": 0.0},
    ]
    betas = (cfg.train.beta1, cfg.train.beta2)
    fused = cfg.train.get("fused_adamw")
    fused = device.type == "cuda" if fused is None else bool(fused)
    return torch.optim.AdamW(groups, lr=cfg.train.lr, betas=betas, fused=fused)


def lr_at(step: int, cfg: DictConfig) -> float:
    """Learning rate of 0-based ``step``: linear warmup to ``train.lr`` over
    ``train.warmup_steps`` steps, then cosine decay to ``lr * min_lr_ratio`` at the last step."""
    t = cfg.train
    if step < t.warmup_steps:
        return t.lr * (step + 1) / t.warmup_steps
    progress = (step - t.warmup_steps) / max(1, t.steps - t.warmup_steps)
    floor = t.lr * t.min_lr_ratio
    return floor + 0.5 * (t.lr - floor) * (1 + math.cos(math.pi * min(1.0, progress)))


def grad_norm(model: nn.Module, clip: float = 0.0) -> torch.Tensor:
    """The global L2 norm of the gradients, before clipping; clips them to ``clip`` when > 0.

    Without clipping the gradients are only measured (never rescaled, not even by 1.0).
    """
    if clip > 0:
        return torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    norms = [torch.linalg.vector_norm(p.grad) for p in model.parameters() if p.grad is not None]
    if not norms:
        return torch.zeros(())
    return torch.linalg.vector_norm(torch.stack(norms))
