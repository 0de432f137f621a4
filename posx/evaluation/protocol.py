"""Evaluation protocols: which windows of a sequence the model reads, and which tokens each
window scores. Every scored token is scored exactly once.

``full``: each held-out sequence of the eval length ``L`` is one window; token ``t`` is
predicted from all ``t + 1`` tokens up to it (the extrapolation regime).

``sliding``: the model never reads more than ``window`` (``W``) tokens. The first window is
``[0, W)`` and scores all its tokens; each next window moves right by ``stride`` (``S``) and
scores only the ``S`` tokens it adds (the last window ends at ``L`` and may add fewer). Token
``t >= W`` is scored in the first window that contains it, the one that gives it the most
context: between ``W - S + 1`` and ``W`` tokens (exactly ``W`` when ``S = 1``). With
``W >= L`` there is one window and the result equals ``full``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from posx.errors import ConfigError
from posx.evaluation.chunks import LOSS_CHUNK
from posx.model.transformer import TransformerLM
from posx.tasks.base import Batch

MODES = ("full", "sliding")


@dataclass(frozen=True)
class Protocol:
    """How one eval length is read: ``window`` tokens at a time, moving by ``stride``."""

    mode: str
    window: int
    stride: int


def resolve_protocol(
    mode: str, length: int, window: int | None, stride: int | None, train_length: int
) -> Protocol:
    """The protocol actually run at ``length``, as recorded in each row.

    Args:
        mode: ``full`` or ``sliding``.
        length: Eval length ``L``.
        window: Sliding window (default: the training length); capped at ``L``.
        stride: Sliding stride (default: half the window); capped at the window.
        train_length: The run's training length.

    Returns:
        ``full``: window = stride = ``L``. ``sliding``: the effective window and stride
        (a window that covers ``L`` is one window, so its stride is ``L`` too).
    """
    if mode not in MODES:
        raise ConfigError(f"unknown eval mode {mode!r}; choose from {', '.join(MODES)}")
    if mode == "full":
        return Protocol("full", length, length)
    w = min(window or train_length, length)
    s = min(stride or max(1, w // 2), w)
    return Protocol("sliding", w, length if w == length else s)


@dataclass(frozen=True)
class Window:
    """Window ``[start, end)`` of a sequence; positions ``[score_from, end)`` are scored."""

    start: int
    score_from: int
    end: int


def plan_windows(length: int, window: int, stride: int) -> list[Window]:
    """The windows that cover ``[0, length)``, each position scored by exactly one."""
    if window <= 0 or stride <= 0:
        raise ValueError(f"window and stride must be positive, got {window}, {stride}")
    if window >= length:
        return [Window(0, 0, length)]
    windows, end = [Window(0, 0, window)], window
    while end < length:
        new_end = min(end + stride, length)
        windows.append(Window(new_end - window, end, new_end))
        end = new_end
    return windows


@dataclass
class Tally:
    """Sums over every scored token of an eval set.

    Attributes:
        loss: Float64 ``[L]``: summed loss of the tokens scored at each position.
        hits: Int64 ``[L]``: correct argmax predictions per position.
        count: Int64 ``[L]``: scored tokens per position.
        seq_hits: Int64 ``[n]``: correct predictions per sequence.
        seq_count: Int64 ``[n]``: scored tokens per sequence.
        forward_tokens: Tokens fed through the model (more than scored in sliding mode).
        max_context: The longest context a scored token was predicted from (tokens of its
            window up to and including the input that predicts it); 0 when none is scored.
    """

    loss: Tensor
    hits: Tensor
    count: Tensor
    seq_hits: Tensor
    seq_count: Tensor
    forward_tokens: int = 0
    max_context: int = 0

    @classmethod
    def zeros(cls, length: int, sequences: int) -> Tally:
        z = lambda n, dt: torch.zeros(n, dtype=dt)  # noqa: E731
        return cls(
            z(length, torch.float64),
            z(length, torch.int64),
            z(length, torch.int64),
            z(sequences, torch.int64),
            z(sequences, torch.int64),
        )

    @property
    def exact(self) -> Tensor:
        """Bool ``[n]``: the sequence has scored tokens and all of them are right."""
        return (self.seq_hits == self.seq_count) & (self.seq_count > 0)


def token_losses(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """Per-token cross-entropy and argmax hits, in float32, a chunk of rows at a time.

    Args:
        logits: ``[b, s, vocab]`` in the model's dtype.
        targets: ``[b, s]`` token ids.

    Returns:
        Float32 losses ``[b, s]`` and bool hits ``[b, s]``. Only ``LOSS_CHUNK`` rows are
        converted to float32 at once: a pretrained model's logits at 32k tokens and a 128k
        vocabulary are 8 GiB in bf16, and a float32 copy with its log-softmax would be four
        times that.
    """
    flat, want = logits.flatten(0, 1), targets.flatten()
    losses = torch.empty(want.shape, dtype=torch.float32, device=logits.device)
    hits = torch.empty(want.shape, dtype=torch.bool, device=logits.device)
    for i in range(0, len(want), LOSS_CHUNK):
        part = flat[i : i + LOSS_CHUNK].float()
        losses[i : i + LOSS_CHUNK] = F.cross_entropy(
            part, want[i : i + LOSS_CHUNK], reduction="none"
        )
        hits[i : i + LOSS_CHUNK] = part.argmax(-1) == want[i : i + LOSS_CHUNK]
    return losses.view(targets.shape), hits.view(targets.shape)


def score(
    model: TransformerLM | torch.nn.Module,
    data: Batch,
    protocol: Protocol,
    batch_tokens: int,
    device: torch.device,
    on_batch: Callable[[int, int], None] | None = None,
    positions: Callable[[int, int], Tensor] | None = None,
) -> Tally:
    """Runs ``model`` over ``data`` under ``protocol`` and sums the per-token results.

    Args:
        model: The LM, in eval mode: posx's own, or any module that maps token ids ``[b, s]``
            and positions (or ``None``) to logits ``[b, s, vocab]`` (a pretrained model,
            :mod:`posx.pretrained.evaluate`).
        data: Eval set, ``[n, L]`` tensors on the CPU.
        protocol: Window and stride (see the module docstring).
        batch_tokens: Windows per forward pass = ``max(1, batch_tokens // window)``.
        device: Where the model runs.
        on_batch: Called with ``(windows done, windows total)`` after each forward pass.
        positions: ``(windows, width) -> [width]`` or ``[windows, width]`` positions for each
            forward pass (the run's position strategy); ``None``: ``arange(width)``.

    Returns:
        The per-position and per-sequence sums.
    """
    n, length = data.inputs.shape
    windows = plan_windows(length, protocol.window, protocol.stride)
    width = windows[0].end - windows[0].start  # every window has the same width
    # Work items in order: sequence-major, so a batch reads neighbouring text.
    seq = torch.arange(n).repeat_interleave(len(windows))
    start = torch.tensor([w.start for w in windows]).repeat(n)
    score_from = torch.tensor([w.score_from for w in windows]).repeat(n)
    tally, total = Tally.zeros(length, n), len(seq)
    per_batch = max(1, batch_tokens // width)
    offsets = torch.arange(width)
    for i in range(0, total, per_batch):
        rows, pos = seq[i : i + per_batch, None], start[i : i + per_batch, None] + offsets
        scored = data.mask[rows, pos] & (pos >= score_from[i : i + per_batch, None])
        inputs, targets = data.inputs[rows, pos].to(device), data.targets[rows, pos].to(device)
        model_pos = None if positions is None else positions(*inputs.shape).to(device)
        losses, hit = token_losses(model(inputs, model_pos), targets)  # logits [b, width, vocab]
        hit = hit.cpu()[scored]
        losses = losses.cpu()[scored].double()
        where, who = pos[scored], rows.expand_as(pos)[scored]
        tally.loss.index_add_(0, where, losses)
        tally.hits.index_add_(0, where, hit.long())
        tally.count.index_add_(0, where, torch.ones_like(where))
        tally.seq_hits.index_add_(0, who, hit.long())
        tally.seq_count.index_add_(0, who, torch.ones_like(who))
        tally.forward_tokens += inputs.numel()
        # Context of the prediction at window offset j is j + 1 tokens; a padded tail is unscored
        # and so never counts (a row can then read less than its length, and says so).
        tally.max_context = max(tally.max_context, int(((offsets + 1) * scored).max()))
        if on_batch is not None:
            on_batch(min(i + per_batch, total), total)
    return tally
