"""Memory one process of a pretrained model's extension needs, estimated from the model's config
before anything is allocated, and the plan refused in one line, with settings that would fit,
when it cannot.

Per process, for ``P`` parameters sharded over ``W`` processes (FSDP), windows of ``L`` tokens,
``m`` windows per forward pass (``t = m·L`` tokens), compute in ``b`` bytes (2 for bf16, 4 for
fp32):

- **states** ``16·P/W``: fp32 master weights, gradients and AdamW's two moments, sharded;
  with ``T`` of the ``P`` parameters trained (LongLoRA: its adapters, embeddings and norms),
  ``(4·P + 12·T)/W``: only what trains has a gradient and optimizer state;
- **gathered** (``W > 1``): the layers FSDP holds unsharded at once (the current and the
  prefetched one, ``2·b·layer``) and the unsharded embeddings and head (``b·(P - n·layer)``);
  (``W = 1`` in bf16: autocast's bf16 copy of the weights, ``2·P``);
- **activations**: per layer and token ``b·(8·h + 4·kv + 4·i) + 8·h`` (projections, MLP, the
  fp32 norms) and, where the config asks for the eager attention kernel, ``8·heads·L`` of
  scores (SDPA, the default, runs flash attention on CUDA and on the CPU and holds none); all
  ``n`` layers kept, or with ``train.checkpointing`` one layer's input per layer plus two
  layers' worth for the one recomputed in backward;
- **loss**: the final hidden states (``t·h·(b + 4)``) and one chunk of ``min(t, 4096)`` rows
  of the head's logits with their fp32 copies and gradient (``(b + 12)·vocab`` per row): the
  loss is computed chunk by chunk, never as ``t × vocab`` logits;
- **runtime** 512 MiB (allocator slack, kernels' workspace).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from posx.errors import ConfigError
from posx.evaluation.chunks import LOSS_CHUNK
from posx.runs.sizes import PRETRAINED_RUNTIME, gib, parse_size

if TYPE_CHECKING:  # the estimate is plain arithmetic: a plan from config.json needs no torch
    import torch

MAX_WORLD = 1024


@dataclass(frozen=True)
class Shape:
    """What the estimate reads of a model: parameter counts and widths."""

    params: int
    layer_params: int
    layers: int
    hidden: int
    heads: int
    kv: int  # key/value width: kv_heads x head_dim
    inner: int
    vocab: int
    trainable: int | None = None  # parameters that train (None: all of them)


@dataclass(frozen=True)
class Layout:
    """How one process trains: length, windows per pass, processes, checkpointing, compute
    bytes, and whether attention holds its scores (the eager kernel)."""

    length: int
    micro: int
    world: int
    checkpointing: bool
    compute_bytes: int
    eager_attention: bool


def model_shape(model: torch.nn.Module, config: Any) -> Shape:
    """The :class:`Shape` of a model built on the meta device from ``config``."""
    get = lambda *names: next((getattr(config, n) for n in names if getattr(config, n, None)), 0)  # noqa: E731
    hidden = get("hidden_size", "n_embd")
    heads = get("num_attention_heads", "n_head")
    head_dim = get("head_dim") or hidden // max(heads, 1)
    split = set(getattr(model, "_no_split_modules", None) or ())
    blocks = [m for m in model.modules() if type(m).__name__ in split]
    return Shape(
        params=sum(p.numel() for p in model.parameters()),
        layer_params=max((sum(p.numel() for p in b.parameters()) for b in blocks), default=0),
        layers=get("num_hidden_layers", "n_layer") or len(blocks),
        hidden=hidden,
        heads=heads,
        kv=(get("num_key_value_heads") or heads) * head_dim,
        inner=get("intermediate_size", "n_inner") or 4 * hidden,
        vocab=get("vocab_size"),
    )


def estimate(shape: Shape, layout: Layout) -> dict[str, int]:
    """Bytes per process, by part (see the module docstring)."""
    s, lay, b = shape, layout, layout.compute_bytes
    tokens = lay.micro * lay.length
    if lay.world > 1:
        gathered = b * (2 * s.layer_params + max(0, s.params - s.layers * s.layer_params))
    else:
        gathered = 2 * s.params if b == 2 else 0
    per_layer = b * (8 * s.hidden + 4 * s.kv + 4 * s.inner) + 8 * s.hidden
    if lay.eager_attention:
        per_layer += 8 * s.heads * lay.length
    if lay.checkpointing:
        acts = tokens * (s.layers * b * s.hidden + 2 * per_layer)
    else:
        acts = tokens * (s.layers + 1) * per_layer
    loss = tokens * s.hidden * (b + 4) + min(tokens, LOSS_CHUNK) * s.vocab * (b + 12)
    trained = s.params if s.trainable is None else s.trainable
    return {
        "states": (4 * s.params + 12 * trained) // lay.world,
        "gathered": gathered,
        "activations": acts,
        "loss": loss,
        "runtime": PRETRAINED_RUNTIME,
    }


def describe(parts: dict[str, int]) -> str:
    """``states 14.9 GiB + gathered ... = 31.2 GiB``."""
    items = " + ".join(f"{k} {gib(v)}" for k, v in parts.items())
    return f"{items} = {gib(sum(parts.values()))}"


def fitting(shape: Shape, layout: Layout, room: int) -> tuple[str, int] | None:
    """The first change of ``layout`` whose estimate fits ``room`` (checkpointing, one window
    per pass, more processes), as the settings to give, and its estimate; None when none does."""
    tries = []
    if not layout.checkpointing:
        tries.append(("train.checkpointing=true", replace(layout, checkpointing=True)))
    small = replace(layout, checkpointing=True, micro=1)
    if layout.micro > 1:
        tries.append(("train.checkpointing=true train.micro_batch=1", small))
    world = layout.world * 2
    while world <= MAX_WORLD:
        tries.append((f"{world} processes (torchrun) with train.checkpointing=true "
                      "train.micro_batch=1", replace(small, world=world)))  # fmt: skip
        world *= 2
    for text, lay in tries:
        need = sum(estimate(shape, lay).values())
        if need <= room:
            return text, need
    return None


def room(
    max_memory: str | int | None, free: Callable[[], tuple[int, str] | None]
) -> tuple[int, str] | None:
    """The bytes one process may use and how to say them: ``train.max_memory`` where set, else
    what ``free`` finds on the device (None: it cannot be told, and nothing is refused).

    Raises:
        ConfigError: ``train.max_memory`` is not a size.
    """
    limit = parse_size(max_memory, "train.max_memory")
    return (limit, f"the limit of {gib(limit)} you set") if limit else free()


def check_room(shape: Shape, layout: Layout, found: tuple[int, str] | None, name: str) -> None:
    """Refuses extending model ``name`` when its estimate exceeds ``found`` (:func:`room`),
    naming settings that would fit.

    Raises:
        ConfigError: One line: the estimate, the room, and what would fit.
    """
    need = sum(estimate(shape, layout).values())
    if found is None or need <= found[0]:
        return
    space, where = found
    better = fitting(shape, layout, space)
    hint = (
        f"would fit: {better[0]} ({gib(better[1])} per process)"
        if better
        else "no number of processes fits it: shorten extend.length"
    )
    raise ConfigError(
        f"extending {name} at windows of {layout.length} tokens needs about {gib(need)} per "
        f"process ({layout.world} process(es)), more than {where}; {hint} (posx extend ... "
        "--dry-run prints the plan)"
    )
