"""Memory a training step or an evaluation batch will need, estimated before anything is
allocated, and the check that refuses what cannot fit.

``train.length=1000000000`` asks for hundreds of GB (a learned table of 10^9 rows, batches of
10^9 tokens); allocating first and failing later can take the machine down. The estimates count
the large terms (weights and optimizer state, the data, activations per token, attention
scores) from the model's shape, which a model built on the ``meta`` device gives without
allocating. They aim to be at or above what is measured (docs/reliability.md), since they only
need to tell what fits from what cannot.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from omegaconf import DictConfig

from posx.config.build import build_model, build_task
from posx.errors import ConfigError, one_line
from posx.evaluation.protocol import resolve_protocol
from posx.model.attention import choose_kernel
from posx.model.transformer import TransformerLM
from posx.positions import PositionStrategy
from posx.runs.sizes import cpu_room, gib
from posx.tasks.text import sequences_for

log = logging.getLogger(__name__)

FLOAT = 4  # bytes: float32 activations (bf16 autocast on CUDA only makes them smaller)
INDEX = 8  # bytes: int64 token ids and positions
# Bytes per data token: inputs and targets (int64) and the mask (bool), times the temporaries a
# task's generator holds while it builds them (about 3x for copy and text).
DATA_BYTES = (2 * INDEX + 1) * 3
# What the process needs besides the tensors counted (kernels' scratch, allocator slack).
RUNTIME = 128 * 2**20


@dataclass(frozen=True)
class ModelShape:
    """What the estimates need to know about a model (a ``meta`` one will do).

    Attributes:
        params: Parameters (the encoding's included).
        d_model, n_layers, n_heads, d_ff: The Transformer's sizes.
        vocab: Vocabulary size (the logits' width).
        attend: The encoding computes attention itself (query-blocked score matrices).
        bias: The encoding adds an attention bias that runs query-blocked (bias matrices).
        learned_bias: Its attention bias has trainable parameters, so training keeps every
            block's scores for the backward pass.
        block: Queries per attention block on the blocked paths (0: all at once).
        score_bytes: What the encoding keeps per attention score and layer in training.
        block_score_bytes: What one query block needs per attention score in evaluation.
    """

    params: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    vocab: int
    attend: bool
    bias: bool
    learned_bias: bool
    block: int
    score_bytes: int
    block_score_bytes: int

    @classmethod
    def of(cls, model: TransformerLM, device: torch.device | None = None) -> ModelShape:
        """The shape of ``model`` as it will run on ``device`` (on CUDA a bias runs fused in
        FlexAttention, which keeps no score matrices)."""
        first, enc = model.blocks[0], model.encoding
        block = first.attn.block_size
        blocked_bias = enc.has_bias and not flex_enabled(model, device or torch.device("cpu"))
        return cls(
            params=model.num_parameters(),
            d_model=model.d_model,
            n_layers=len(model.blocks),
            n_heads=first.attn.n_heads,
            d_ff=first.fc.out_features,
            vocab=model.head.out_features,
            attend=enc.has_attend,
            bias=blocked_bias,
            learned_bias=blocked_bias and any(p.requires_grad for p in enc.parameters()),
            # An encoding with its own attention may use its own blocks (None: none at all).
            block=int(getattr(enc, "block_size", block) or 0),
            score_bytes=enc.score_bytes,
            block_score_bytes=enc.block_score_bytes,
        )


def model_for_estimates(cfg: DictConfig, vocab_size: int) -> TransformerLM:
    """The run's model for the estimates, built on the ``meta`` device (nothing allocated).

    An estimate is an aid and must not stop a run: an encoding that computes with data while
    it is built, or while it says which lengths it supports, cannot run on ``meta`` (``nonzero``
    and ``item`` have no value there). It is then built on the CPU, which allocates its weights
    (as training will anyway), and one warning line says so.

    Raises:
        ConfigError: The config cannot build a model at all (the CPU build fails the same way).
    """
    try:
        with torch.device("meta"):
            model = build_model(cfg, vocab_size)
            model.encoding.unsupported_reason(cfg.train.length)
        return model
    except Exception as err:  # noqa: BLE001 - whatever the meta device cannot compute
        model = build_model(cfg, vocab_size)  # a real config error is raised here
        log.warning(
            f"{type(model.encoding).__name__} cannot be built on the meta device "
            f"({one_line(err)[:160]}); its memory estimate uses a model built on the CPU"
        )
        return model


def flex_enabled(model: TransformerLM, device: torch.device) -> bool:
    """Whether ``model``'s bias runs in FlexAttention on ``device`` (no score matrices kept),
    as :func:`posx.model.attention.choose_kernel` decides for a training step (with gradients:
    the estimate then never counts on a kernel evaluation alone would get)."""
    kernel = choose_kernel(model.encoding, device, model.attention_kernel, True, False)
    return kernel == "flex"


def _scores(shape: ModelShape, windows: int, width: int, training: bool) -> int:
    """Attention score memory. Training with the encoding's own attention or a trainable bias
    keeps every block's scores, ``[b, h, s, s] / 2`` per layer, for the backward pass; otherwise
    one ``[b, h, block, keys]`` block lives at a time."""
    if shape.attend or shape.learned_bias:
        if training:
            pairs = windows * shape.n_heads * width * (width + 1) // 2
            return pairs * shape.n_layers * shape.score_bytes
        block = windows * shape.n_heads * min(shape.block or width, width) * width
        return block * shape.block_score_bytes
    if shape.bias:  # a fixed bias: blocks kept under 2^22 elements (posx.model.attention)
        return min(2**22, windows * shape.n_heads * width * width) * 3 * FLOAT
    return 0  # fused causal attention: memory linear in the length


def train_step_bytes(shape: ModelShape, batch: int, length: int) -> int:
    """Memory of one training step: weights, gradients and AdamW's two moments, one batch of
    data, the activations autograd keeps, and attention scores."""
    tokens = batch * length
    per_token = FLOAT * (
        3 * shape.d_model
        + shape.n_layers * (13 * shape.d_model + 2 * shape.d_ff)  # what each block keeps
        + 4 * shape.vocab  # logits, their float copy, log-softmax, gradient
    )
    state = 4 * FLOAT * shape.params
    tokens_bytes = tokens * (DATA_BYTES + INDEX + per_token)
    return RUNTIME + state + tokens_bytes + _scores(shape, batch, length, True)


def eval_bytes(
    shape: ModelShape, length: int, sequences: int, window: int, batch_tokens: int
) -> int:
    """Memory of evaluating at ``length``: the weights, the held-out set (``sequences`` x
    ``length``) and its sums per position, and one forward pass of ``window``-token windows
    (``max(1, batch_tokens // window)`` at a time; nothing kept for backward)."""
    windows = max(1, batch_tokens // window)
    tokens = windows * window
    per_token = FLOAT * (8 * shape.d_model + 2 * shape.d_ff + 4 * shape.vocab) + 3 * INDEX
    data = sequences * length * DATA_BYTES + length * 3 * INDEX
    forward = tokens * per_token + _scores(shape, windows, window, False)
    return RUNTIME + FLOAT * shape.params + data + forward


def available_bytes(device: torch.device) -> tuple[int, str] | None:
    """Memory free for this process on ``device``, and how to say it (``the 20.1 GiB available``);
    None when it cannot be told (then only an explicit limit is checked)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free), f"the {gib(free)} free on {device}"
    if device.type != "cpu":
        return None
    return cpu_room()


def check_fits(need: int, what: str, device: torch.device, limit: int | None, hint: str) -> None:
    """Refuses ``need`` bytes when they exceed ``limit`` (an explicit setting) or, without
    one, the memory available on ``device``.

    Args:
        need: Estimated bytes.
        what: What needs them, e.g. ``a training step (batch 32 x length 10^9)``.
        device: Where they would be allocated.
        limit: An explicit limit in bytes (``--max-memory``, ``train.max_memory``), or None.
        hint: What the user can change, e.g. ``lower train.length``.

    Raises:
        ConfigError: One line with the estimate and the limit.
    """
    if limit is not None:
        room, where = limit, f"the limit of {gib(limit)} you set"
    else:
        found = available_bytes(device)
        if found is None:
            return
        room, where = found
    if need > room:
        raise ConfigError(f"{what} needs about {gib(need)} of memory, more than {where}; {hint}")


def check_eval_fits(
    cfg: DictConfig,
    model: TransformerLM,
    strategy: PositionStrategy,
    lengths: list[int],
    device: torch.device,
    limit: int | None,
    what: str,
    hint: str,
) -> None:
    """Refuses the first eval length whose memory (:func:`eval_bytes`) cannot fit; lengths the
    encoding or position strategy does not support are skipped (they allocate nothing).

    Args:
        cfg: The run's config (``eval.*`` and ``train.length`` are read).
        model: The run's model, typically built on the ``meta`` device.
        strategy: The run's position strategy.
        lengths: Eval lengths.
        device: Where evaluation runs.
        limit: An explicit limit in bytes, or None for the memory available.
        what: Who is evaluated, e.g. ``evaluating RUN``.
        hint: What the user can change.
    """
    shape, e = ModelShape.of(model, device), cfg.eval
    # A structured strategy's IDs count digits, which only the task knows (a synthetic task,
    # cheap to build); the other strategies count tokens and never read it.
    task = build_task(cfg) if strategy.needs_structure else None
    for length in lengths:
        proto = resolve_protocol(e.mode, length, e.window, e.stride, cfg.train.length)
        longest = task.longest_number(length) if task is not None else proto.window
        if strategy.eval_reason(model.encoding, proto.window, longest):
            continue
        need = eval_bytes(shape, length, sequences_for(e.tokens, length), proto.window,
                          e.batch_tokens)  # fmt: skip
        check_fits(need, f"{what} at length {length}", device, limit, hint)
