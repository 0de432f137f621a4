"""The engine a pretrained model is fine-tuned on: one process as it is, or several processes
under ``torchrun`` through PyTorch FSDP2 (:func:`torch.distributed.fsdp.fully_shard`).

FSDP2 rather than ``accelerate``'s FSDP: it is what ``accelerate`` (version 2 plugin) drives
underneath, it needs no launcher config file, it runs on CPU processes with gloo (the tests run
two of them), its parameters are DTensors that :mod:`torch.distributed.checkpoint` saves as
sharded checkpoints and loads back into any number of processes, and it composes with the
model's own activation checkpointing. Each decoder layer (the model's ``_no_split_modules``) is
one FSDP unit, the embeddings and head are the root's; bf16 mixed precision keeps fp32 master
weights and reduces gradients in fp32.

With several processes, every process builds the model on the ``meta`` device and shards it;
rank 0 alone reads the weights (weights-only loading, :mod:`posx.pretrained.load`) and
broadcasts them, so host memory holds one full copy per node's rank 0, not one per process.

A method that changes the model before it trains (LongLoRA's adapters: ``adapt``) changes
every copy the same way: the one process's loaded model; the meta model before it is sharded
and rank 0's loaded copy whose weights are broadcast into it; and, after training, the whole
model rank 0 rebuilds from the gathered weights (:func:`rebuild`) to save and merge. FSDP2
shards frozen parameters with the others but gives them no gradient, and the optimizer holds
state for the trainable ones only (:func:`posx.pretrained.extend.train.make_optimizer`).

The loss (:class:`LossModel`) is the sum of next-token cross-entropies, computed from the last
hidden states chunk by chunk (each chunk's logits recomputed in backward), so a long window
never holds ``length × vocab`` logits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from posx.evaluation.chunks import LOSS_CHUNK
from posx.pretrained import load
from posx.pretrained.scaling import rotary_modules
from posx.runtime.distributed import World

Adapt = Callable[[torch.nn.Module], Any]


class LossModel(torch.nn.Module):
    """A causal LM as a loss: ``(ids [b, L], pos [b, L]) -> summed next-token loss``.

    Args:
        model: The ``transformers`` causal LM.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        cfg = model.config
        # a head that post-processes its logits (soft-capping, scaling) is run whole
        self.chunked = not any(getattr(cfg, k, None) for k in ("final_logit_softcapping",
                                                                "logit_scale"))  # fmt: skip

    def forward(self, ids: Tensor, pos: Tensor) -> Tensor:
        """The summed cross-entropy of tokens ``1..L-1`` given those before (fp32 scalar)."""
        targets = ids[:, 1:].reshape(-1)
        if not self.chunked:
            logits = self.model(input_ids=ids, position_ids=pos, use_cache=False).logits
            flat = logits[:, :-1].reshape(-1, logits.shape[-1]).float()
            return F.cross_entropy(flat, targets, reduction="sum")
        out = self.model.base_model(input_ids=ids, position_ids=pos, use_cache=False)
        hidden = out.last_hidden_state[:, :-1].reshape(targets.numel(), -1)
        head = self.model.get_output_embeddings()
        total = hidden.new_zeros((), dtype=torch.float32)
        for start in range(0, len(targets), LOSS_CHUNK):
            part = slice(start, start + LOSS_CHUNK)
            total = total + checkpoint(_chunk_loss, head, hidden[part], targets[part],
                                       use_reentrant=False)  # fmt: skip
        return total


def _chunk_loss(head: torch.nn.Module, hidden: Tensor, targets: Tensor) -> Tensor:
    return F.cross_entropy(head(hidden).float(), targets, reduction="sum")


@dataclass
class Engine:
    """The model being fine-tuned and how.

    Attributes:
        loss: The wrapped model (FSDP's root when sharded).
        model: The ``transformers`` model inside it.
        world: This process's place.
        device: Where it computes.
        autocast: bf16 autocast (one process); FSDP's policy does it when sharded.
        adapt: What changed the model before training (None: nothing).
        adapted: What ``adapt`` returned for this process's model.
    """

    loss: LossModel
    model: torch.nn.Module
    world: World
    device: torch.device
    autocast: bool
    adapt: Adapt | None = None
    adapted: Any = None

    def sync_gradients(self, last: bool) -> None:
        """Reduce gradients only after the last micro-batch of a step (FSDP)."""
        if hasattr(self.loss, "set_requires_gradient_sync"):
            self.loss.set_requires_gradient_sync(last)

    def __call__(self, ids: Tensor, pos: Tensor) -> Tensor:
        """The summed loss of one micro-batch (ids, pos ``[m, L]`` on the CPU)."""
        ids, pos = ids.to(self.device), pos.to(self.device)
        with torch.autocast(self.device.type, torch.bfloat16, enabled=self.autocast):
            return self.loss(ids, pos)


def build_engine(
    source: load.Source,
    config: Any,
    trust: bool,
    world: World,
    device: torch.device,
    bf16: bool,
    checkpointing: bool,
    adapt: Adapt | None = None,
) -> Engine:
    """Loads the model with its extended ``config`` (weights-only) and makes it trainable: on one
    process as it is, on several sharded with FSDP2.

    Args:
        source: The model's files.
        config: Its config with the method's scaling.
        trust: Whether it may run its own code.
        world: The processes.
        device: This process's device.
        bf16: bf16 mixed precision (fp32 master weights).
        checkpointing: Recompute each layer's activations in backward.
        adapt: Changes the model in place before it trains (LongLoRA's adapters), on the CPU.

    Returns:
        The engine.
    """
    if not world.distributed:
        model = load.load_model(source, config, torch.float32, trust)
        _prepare(model, checkpointing)
        adapted = adapt(model) if adapt else None
        model.to(device)
        return Engine(LossModel(model), model, world, device, bf16, adapt, adapted)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    transformers = load.require_transformers()
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, trust_remote_code=trust)
    _prepare(model, checkpointing)
    adapted = adapt(model) if adapt else None
    policy = MixedPrecisionPolicy(
        param_dtype=torch.bfloat16 if bf16 else None,
        reduce_dtype=torch.float32 if bf16 else None,
    )
    split = set(getattr(model, "_no_split_modules", None) or ())
    for block in [m for m in model.modules() if type(m).__name__ in split]:
        fully_shard(block, mp_policy=policy)
    wrapper = LossModel(model)
    fully_shard(wrapper, mp_policy=policy)
    wrapper.to_empty(device=device)
    for parent, name, module in rotary_modules(model):  # buffers are not in the state dict
        setattr(parent, name, type(module)(config=model.config).to(device))
    full: dict[str, Tensor] = {}
    if world.is_main:
        loaded = load.load_model(source, config, torch.float32, trust)
        if adapt:  # the same adapters, from the same seed, as the sharded model's
            adapt(loaded)
        full = {f"model.{k}": v for k, v in loaded.state_dict().items()}
        del loaded
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(wrapper, full, options=options)
    return Engine(wrapper, model, world, device, False, adapt, adapted)


def rebuild(
    config: Any, trust: bool, weights: dict[str, Tensor], adapt: Adapt
) -> tuple[torch.nn.Module, Any]:
    """The trained model whole on the CPU from its gathered ``weights`` (:func:`full_weights`
    of a sharded engine): built from ``config`` on meta, changed by ``adapt`` as the engine's
    was, the weights put in as they are (no second copy). Rank 0 saves and merges it.

    Returns:
        The model and what ``adapt`` returned for it.
    """
    transformers = load.require_transformers()
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, trust_remote_code=trust)
    adapted = adapt(model)
    model.load_state_dict(weights, assign=True)
    for parent, name, rotary in rotary_modules(model):
        setattr(parent, name, type(rotary)(config=model.config))
    model.tie_weights()
    model.eval()
    return model, adapted


def _prepare(model: torch.nn.Module, checkpointing: bool) -> None:
    model.train()
    model.config.use_cache = False
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def full_weights(engine: Engine) -> dict[str, Tensor]:
    """The whole model's weights on the CPU, on rank 0 (``{}`` on the others; every process
    must call it)."""
    if not engine.world.distributed:
        return {k: v.detach().cpu() for k, v in engine.model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    weights = get_model_state_dict(engine.loss, options=options)
    return {k.removeprefix("model."): v for k, v in weights.items()}


def save_model(
    model: torch.nn.Module, weights: dict[str, Tensor], out: Path, dtype: torch.dtype
) -> None:
    """``save_pretrained`` of the extended ``model`` (safetensors, its config with the scaling)
    with ``weights`` in ``dtype`` (the base's)."""
    cast = {k: v.to(dtype) if v.is_floating_point() else v for k, v in weights.items()}
    model.config.use_cache = True
    model.config.dtype = dtype
    model.save_pretrained(out, state_dict=cast, safe_serialization=True)
