"""Memory a pretrained model's evaluation needs, estimated from its config before any weight is
loaded, and refused in one line when it cannot fit (as posx does for its own models).

The count is deliberately generous, since it only needs to tell what fits from what cannot:

- weights: parameters (counted on a model built on the ``meta`` device) times the dtype's bytes;
- per forward pass of ``b`` windows of ``w`` tokens: the KV a cache would hold
  (``2 · layers · b · w · kv_heads · head_dim`` values), a few hidden-state and MLP activations
  (``b · w · (4 · hidden + 2 · intermediate)``), one layer's attention scores
  (``b · heads · w²``) only where the config asks for the eager kernel (SDPA, the default, and
  flash never hold them), and the logits: the model's in its dtype (``b · w · vocab``), which
  dominate at long lengths, plus float32 chunks of :data:`posx.evaluation.chunks.LOSS_CHUNK`
  rows with their log-softmax.
"""

from __future__ import annotations

from typing import Any

import torch

from posx.errors import ConfigError
from posx.evaluation.chunks import LOSS_CHUNK
from posx.runs.resources import check_fits, gib
from posx.runs.sizes import PRETRAINED_RUNTIME


def parameter_count(config: Any, transformers: Any, trust: bool = False) -> int:
    """Parameters of the model ``config`` describes (built on the meta device: no memory;
    ``trust``: the user allowed the model's own code)."""
    try:
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config, trust_remote_code=trust)
    except Exception as err:  # noqa: BLE001 - a config transformers cannot build
        raise ConfigError(f"cannot build {config.model_type} from its config: {err}") from err
    return sum(p.numel() for p in model.parameters())


def forward_bytes(config: Any, windows: int, width: int, dtype_bytes: int) -> int:
    """Bytes of one forward pass over ``windows`` windows of ``width`` tokens (see above)."""
    get = lambda *names: next((getattr(config, n) for n in names if getattr(config, n, None)), 0)  # noqa: E731
    hidden = get("hidden_size", "n_embd", "d_model")
    layers = get("num_hidden_layers", "n_layer", "num_layers")
    heads = get("num_attention_heads", "n_head")
    kv = get("num_key_value_heads") or heads
    head_dim = get("head_dim") or hidden // max(heads, 1)
    inner = get("intermediate_size", "n_inner") or 4 * hidden
    vocab = get("vocab_size")
    tokens = windows * width
    kv_cache = 2 * layers * tokens * kv * head_dim * dtype_bytes
    activations = tokens * (4 * hidden + 2 * inner) * dtype_bytes
    eager = getattr(config, "_attn_implementation", None) == "eager"
    scores = windows * heads * width * width * 4 if eager else 0
    logits = tokens * vocab * dtype_bytes + min(tokens, LOSS_CHUNK) * vocab * 8
    return kv_cache + activations + scores + logits


def check_pretrained_fits(
    config: Any,
    params: int,
    dtype: torch.dtype,
    longest: int,
    batch_tokens: int,
    device: torch.device,
    limit: int | None,
    name: str,
) -> int:
    """Refuses an evaluation whose weights plus longest forward pass cannot fit.

    Args:
        config: The model's config.
        params: Its parameter count.
        dtype: The dtype its weights load in.
        longest: The widest window evaluated (tokens).
        batch_tokens: Tokens per forward pass (windows per pass = ``batch_tokens // width``).
        device: Where it runs.
        limit: ``--max-memory`` in bytes, or None for what is available.
        name: The model, for the message.

    Returns:
        The estimate in bytes.

    Raises:
        ConfigError: One line with the estimate and the room.
    """
    size = torch.finfo(dtype).bits // 8
    windows = max(1, batch_tokens // max(longest, 1))
    need = params * size + forward_bytes(config, windows, longest, size) + PRETRAINED_RUNTIME
    hint = (
        "evaluate shorter --lengths, lower eval.batch_tokens, use --dtype bf16, or a larger "
        "device (docs/pretrained.md)"
    )
    weights = gib(params * size)
    check_fits(need, f"{name} ({weights} of weights) at {longest} tokens", device, limit, hint)
    return need
