"""LongLoRA (Chen et al. 2023) for ``posx extend hf:NAME extension=longlora``: LoRA adapters
through ``peft`` plus trainable embeddings and norms, position interpolation, and shifted sparse
attention (S²-Attn) while training.

- **What trains**: LoRA of rank ``r`` and scale ``alpha`` on the attention projections
  (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj`` by default), and every embedding and norm
  layer (the paper's "embedding and normalization layers trainable"); everything else frozen.
- **Attention**: a function registered in ``transformers``' ``AttentionInterface`` as
  :data:`IMPLEMENTATION` (with SDPA's mask) and selected with ``set_attn_implementation``, so
  no model class is patched: while the model is in training mode it is S²-Attn
  (:mod:`posx.kernels.shifted_sparse`, group = ``group_fraction`` of the length), in eval mode
  full causal attention.
- **Processes**: under ``torchrun`` the adapted model is sharded with FSDP2 as a full
  fine-tuning is (:mod:`posx.pretrained.extend.engine`, :class:`LoraAdapter` its ``adapt``):
  the frozen weights are sharded too but have no gradient and no optimizer state; the adapters
  start from the same seeded values on any number of processes.
- **Output**: the adapters merged into the weights (``peft``'s ``merge_and_unload``), saved as
  any extension's ``model/``, loadable in plain ``transformers``; the adapter itself
  (``save_pretrained`` of the ``peft`` model) and the trained embeddings and norms
  (``trainable_params.safetensors``, the reference's convention) in ``adapter/`` beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from posx.errors import ConfigError
from posx.kernels.shifted_sparse import shifted_sparse_attention
from posx.pretrained.attention import register_attention, repeat_heads
from posx.pretrained.extend.lora_spec import LoraSpec

IMPLEMENTATION = "posx_s2attn"
CONFIG_KEY = "posx_s2attn_group_fraction"
ADAPTER_DIR = "adapter"
TRAINABLE_FILE = "trainable_params.safetensors"


def register() -> None:
    """Registers the attention function and its mask with ``transformers`` (idempotent)."""
    register_attention(IMPLEMENTATION, s2_attention)


def s2_attention(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """S²-Attn while ``module`` trains, full causal attention otherwise (the interface's
    signature: ``[b, h, s, d]`` in, ``[b, s, h, d]`` out)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if not module.training:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling,
                                      dropout=dropout, **kwargs)  # fmt: skip
    heads = query.shape[1]
    key, value = repeat_heads(key, heads), repeat_heads(value, heads)
    s = query.shape[-2]
    group = max(2, round(s * getattr(module.config, CONFIG_KEY)))
    out = shifted_sparse_attention(query, key, value, group, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


def check_length(length: int, spec: LoraSpec) -> None:
    """The training length must hold whole groups of S²-Attn.

    Raises:
        ConfigError: It does not, naming lengths that would.
    """
    group = max(2, round(length * spec.group_fraction))
    if length % group or group % 2:
        raise ConfigError(
            f"S²-Attn groups {length} tokens by {group} (longlora.group_fraction "
            f"{spec.group_fraction}); the length must be a multiple of an even group "
            f"(e.g. extend.length={4 * 2 * max(1, length // 8)})"
        )


def check_targets(model: torch.nn.Module, spec: LoraSpec) -> None:
    """LoRA's target projections must exist in ``model``.

    Raises:
        ConfigError: None of them does (e.g. GPT-NeoX's fused ``query_key_value``).
    """
    names = {n.rsplit(".", 1)[-1] for n, m in model.named_modules()
             if isinstance(m, torch.nn.Linear)}  # fmt: skip
    missing = [t for t in spec.targets if t not in names]
    if missing:
        raise ConfigError(
            f"extension=longlora adapts {', '.join(spec.targets)}, but "
            f"{model.config.model_type} has no {', '.join(missing)} (its linear layers: "
            f"{', '.join(sorted(names)[:8])}); LongLoRA needs separate attention projections"
        )


def trainable_count(model: torch.nn.Module, spec: LoraSpec) -> int:
    """Parameters LongLoRA trains in ``model`` (built on any device, before LoRA): ``r·(in +
    out)`` per target projection, plus every embedding and norm parameter."""
    linear = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    targets = [m for n, m in linear if n.rsplit(".", 1)[-1] in spec.targets]
    lora = sum(spec.rank * (m.in_features + m.out_features) for m in targets)
    full = sum(p.numel() for n, p in model.named_parameters()
               if any(part in n for part in spec.trainable))  # fmt: skip
    return lora + full


@dataclass(frozen=True)
class Adapted:
    """A model with LongLoRA in it.

    Attributes:
        peft_model: The ``peft`` model wrapping it (for saving the adapter and merging).
        attention: The model's own attention implementation (restored by :func:`merge`).
    """

    peft_model: Any
    attention: str


@dataclass(frozen=True)
class LoraAdapter:
    """LongLoRA as a change the engine makes to each model it builds (its ``adapt``): the
    same adapters, from the same seeded values, whether the model is loaded whole or built on
    the meta device and sharded."""

    spec: LoraSpec
    seed: int

    def __call__(self, model: torch.nn.Module) -> Adapted:
        """Applies LongLoRA to ``model`` in place (:func:`apply_lora`)."""
        attention = model.config._attn_implementation
        return Adapted(apply_lora(model, self.spec, self.seed), attention)


def apply_lora(model: torch.nn.Module, spec: LoraSpec, seed: int = 0) -> Any:
    """Injects LoRA into ``model`` (in place), freezes the rest but embeddings and norms, and
    selects S²-Attn for training. The LoRA matrices ``A`` are drawn from a generator seeded by
    ``seed`` (``B`` starts at zero), not from whatever the global one holds, so one process and
    rank 0 of several start from the same adapters.

    Returns:
        The ``peft`` model wrapping ``model`` (for saving the adapter and merging).
    """
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as err:
        raise ConfigError("extension=longlora needs peft: pip install 'posx[longlora]'") from err
    check_targets(model, spec)
    config = LoraConfig(r=spec.rank, lora_alpha=spec.alpha, target_modules=list(spec.targets),
                        lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        peft_model = get_peft_model(model, config)
    for name, param in model.named_parameters():
        if "lora_" not in name and any(part in name for part in spec.trainable):
            param.requires_grad_(True)
    register()
    setattr(model.config, CONFIG_KEY, float(spec.group_fraction))
    model.set_attn_implementation(IMPLEMENTATION)
    return peft_model


def trainable_names(model: torch.nn.Module) -> list[str]:
    """The names of the parameters that train."""
    return [n for n, p in model.named_parameters() if p.requires_grad]


def save_adapter(peft_model: Any, model: torch.nn.Module, out: Path) -> None:
    """The adapter (``peft``'s ``save_pretrained``) and the trained embeddings and norms
    (:data:`TRAINABLE_FILE`) into ``out``."""
    from safetensors.torch import save_file

    peft_model.save_pretrained(out)
    full = {n: p.detach().cpu().contiguous() for n, p in model.named_parameters()
            if p.requires_grad and "lora_" not in n}  # fmt: skip
    save_file(full, out / TRAINABLE_FILE)


def merge(peft_model: Any, model: torch.nn.Module, implementation: str) -> torch.nn.Module:
    """The adapters merged into the weights (the model plain again: no LoRA layers), its
    attention back to ``implementation``."""
    merged = peft_model.merge_and_unload()
    if hasattr(merged.config, CONFIG_KEY):
        delattr(merged.config, CONFIG_KEY)
    merged.set_attn_implementation(implementation)
    return merged
