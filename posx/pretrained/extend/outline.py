"""The plan of ``posx extend hf:`` as ``--dry-run`` prints it (:class:`Outline`), its lengths
(:func:`lengths`), and the whole plan made from a local model's files alone
(:func:`draft_plan`): ``config.json`` and the safetensors headers, no torch, no transformers,
so ``--dry-run`` answers in well under the seconds those imports take.

The draft answers only where it gives what :func:`posx.pretrained.extend.plan.make_plan` gives
(the same lines, the same estimate; ``tests/unit/pretrained/test_extend_outline.py`` holds them
equal): a local directory of a family whose modules it knows (:data:`FAMILIES`), a config
naming every width and its context with RoPE unscaled (as written, or an older file's
``rope_theta``), not quantized, safetensors weights, a method that sets no LongRoPE, NTK nor
LongLoRA, one process and a device known without torch. Elsewhere it returns None and the plan
is made as before.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posx.errors import ConfigError, PosxWarning
from posx.pretrained import load
from posx.pretrained.extend.memory import Layout, Shape, describe, estimate
from posx.pretrained.extend.method import Method, extended_config, read_method
from posx.pretrained.extend.preview import config_view
from posx.pretrained.extend.settings import Options
from posx.pretrained.header import Tensor, read_tensors
from posx.pretrained.naming import trained_length
from posx.pretrained.scaling import rope_parameters
from posx.runs.sizes import cpu_room

# the model types whose transformers modules the draft counts as the meta model does: one
# decoder block per ``model.layers.N``, a rotary embedding running any rope_type, the head tied
# to the embeddings only where tie_word_embeddings says so (False by default)
FAMILIES = ("llama", "mistral", "qwen2")
WIDTHS = ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
          "vocab_size", "max_position_embeddings")  # fmt: skip
LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


@dataclass(frozen=True)
class Outline:
    """The facts ``--dry-run`` prints, one a line (:meth:`lines`).

    Attributes:
        name: The model as the user named it.
        model_type: Its config's ``model_type``.
        params: Its parameters.
        revision: Its revision (the hub commit or ``dir:<sha256>``).
        method: The method's name.
        rope: The extended config's ``rope_parameters`` (None: no RoPE).
        trained: The base's trained context (tokens).
        length: The target length.
        window: The length fine-tuned at.
        values: The settings.
        world: The processes.
        device: The device type (``cuda``, ``cpu``).
        bf16: bf16 mixed precision.
        parts: The estimate per process, by part (bytes).
        trainable: The parameters that train where not all do (LongLoRA), else None.
    """

    name: str
    model_type: str
    params: int
    revision: str
    method: str
    rope: dict[str, Any] | None
    trained: int
    length: int
    window: int
    values: dict[str, Any]
    world: int
    device: str
    bf16: bool
    parts: dict[str, int]
    trainable: int | None = None

    def lines(self) -> list[str]:
        """The plan for ``--dry-run``, one fact a line."""
        v, w = self.values, self.world
        accum = v["train.batch_size"] // (w * v["train.micro_batch"])
        trains = [] if self.trainable is None else [
            f"trains     {self.trainable:,} of {self.params:,} parameters: gradients and AdamW "
            f"state for these only{', sharded over the processes' if w > 1 else ''}"
        ]  # fmt: skip
        return [
            f"model      {self.name} ({self.model_type}, {parameters(self.params)} parameters, "
            f"revision {self.revision[:16]})",
            f"method     extension={self.method}: rope_parameters {json.dumps(self.rope)}",
            f"lengths    trained context {self.trained}, target {self.length}, fine-tuned at "
            f"windows of {self.window}",
            f"steps      {v['extend.steps']} x {v['train.batch_size']} windows "
            f"({v['extend.steps'] * v['train.batch_size'] * self.window:,} tokens), lr "
            f"{v['extend.lr']:g}, warmup {v['extend.warmup_steps']}",
            f"processes  {w} on {self.device} ({'FSDP2, sharded' if w > 1 else 'one'}), "
            f"micro-batch {v['train.micro_batch']}, accumulation {accum}, "
            f"{'bf16 mixed' if self.bf16 else 'fp32'}, activation checkpointing "
            f"{'on' if v['train.checkpointing'] else 'off'}",
            *trains,
            f"memory     per process: {describe(self.parts)}",
        ]


def parameters(count: int) -> str:
    """A parameter count as people write it: ``6.74B``, ``1.2M``, ``35.1K`` (a tiny model's
    count read ``0.00B``)."""
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= size:
            return f"{count / size:.{2 if suffix == 'B' else 1}f}{suffix}"
    return str(count)


def lengths(values: dict[str, Any], trained: int, name: str, method: Method,
            main: bool) -> tuple[float, int, int]:  # fmt: skip
    """The scaling's factor, the target length and the window fine-tuned at; a length that
    contradicts the factor is one warning (on the main process, ``main``).

    Raises:
        ConfigError: A method that fine-tunes past the trained context given none longer.
    """
    factor = float(values["extend.factor"])
    length = int(values["extend.length"] or round(factor * trained))
    if values["extend.length"] and length != round(factor * trained) and main:
        warnings.warn(  # as `posx extend RUN` says the same contradiction
            f"extend.length={length} is {length / trained:g}× the trained context {trained} of "
            f"{name}, but extend.factor={factor:g} says {round(factor * trained)}: "
            f"fine-tuning at {length} with the scaling's factor {factor:g}",
            PosxWarning,
            stacklevel=3,
        )
    if length <= trained and (method.at_target or method.pose_chunks):
        raise ConfigError(
            f"extend.length={length} is not longer than the trained context of "
            f"{name} ({trained}); raise extend.factor or extend.length"
        )
    return factor, length, length if method.at_target else trained


def check_batch(values: dict[str, Any], world: int) -> None:
    """Refuses a batch the processes' micro-batches cannot share.

    Raises:
        ConfigError: ``train.batch_size`` is no multiple of processes x ``train.micro_batch``.
    """
    if values["train.batch_size"] % (world * values["train.micro_batch"]):
        raise ConfigError(
            f"train.batch_size ({values['train.batch_size']}) must be a multiple of the "
            f"{world} process(es) x train.micro_batch ({values['train.micro_batch']})"
        )


@dataclass(frozen=True)
class Draft:
    """A plan made from the model's files alone: what ``--dry-run`` prints and checks.

    Attributes:
        outline: The lines.
        shape: What the estimate read of the model.
        layout: How one process trains.
        free: The memory the device has free, found when asked (None: cannot be told).
    """

    outline: Outline
    shape: Shape
    layout: Layout
    free: Callable[[], tuple[int, str] | None]


def draft_plan(word: str, values: dict[str, Any], options: Options) -> Draft | None:
    """The ``--dry-run`` plan from a local model's ``config.json`` and safetensors headers, or
    None where only the full plan can answer (see the module docstring).

    Raises:
        ConfigError: What the full plan refuses (a method the model cannot take, lengths that
            extend nothing, a batch the processes cannot share, custom code not allowed), and a
            damaged ``config.json``, safetensors header or index, in one line naming the file.
    """
    if "WORLD_SIZE" in os.environ or importlib.util.find_spec("transformers") is None:
        return None  # torchrun's processes, or the plan's own refusal of a missing library
    method = read_method(str(values["extension"]), options.config_dirs)
    if method.lora is not None or method.scaling in ("longrope", "ntk"):
        return None  # their plan reads the model's modules (adapters) or posx's encodings
    source = load.find_model(word, options.revision, options.allow_download, weights=False)
    raw = source.config
    if raw.get("model_type") not in FAMILIES or not Path(source.name).expanduser().is_dir():
        return None
    rope = _unscaled_rope(raw)
    if load.check_code(source, options.trust_remote_code, set(FAMILIES)) or not _plain(raw):
        return None
    device = _device(str(values["train.device"]), values["train.max_memory"])
    tensors = read_tensors(source.path) if source.weights == "safetensors" else None
    if device is None or tensors is None or rope is None:
        return None
    base = config_view({**raw, "rope_parameters": rope})
    trained, _ = trained_length(base, None)
    factor, length, window = lengths(values, trained, source.name, method, True)
    config = extended_config(base, method, factor, trained, length)
    world = int(values["train.world_size"] or 1)
    check_batch(values, world)
    shape = _shape(raw, tensors)
    if shape is None:
        return None
    bf16 = values["train.precision"] == "bf16" or (
        values["train.precision"] == "auto" and device == "cuda"
    )
    layout = Layout(window, values["train.micro_batch"], world, values["train.checkpointing"],
                    2 if bf16 else 4, False)  # fmt: skip
    outline = Outline(source.name, raw["model_type"], shape.params, source.revision, method.name,
                      rope_parameters(config), trained, length, window, values, world, device,
                      bf16, estimate(shape, layout))  # fmt: skip
    return Draft(outline, shape, layout, cpu_room if device == "cpu" else lambda: None)


def _plain(raw: dict[str, Any]) -> bool:
    """A config transformers reads as written: every width given, no attention kernel asked
    for (the eager one holds scores the estimate counts), not quantized."""
    widths = all(isinstance(raw.get(k), int) and raw[k] > 0 for k in WIDTHS)
    kernel = any("attn_implementation" in k for k in raw)
    packed = "quantization_config" in raw  # its headers hold packed integers, not parameters
    return widths and not kernel and not packed


def _unscaled_rope(raw: dict[str, Any]) -> dict[str, Any] | None:
    """The ``rope_parameters`` transformers reads from a config whose RoPE is unscaled: as
    written, or from an older file's ``rope_theta`` (``{"rope_theta": θ, "rope_type":
    "default"}``); None for a scaled (or unreadable) one, whose reading the full plan does."""
    if raw.get("rope_scaling"):
        return None
    rope = raw.get("rope_parameters")
    if rope is None:
        theta = raw.get("rope_theta")
        ok = isinstance(theta, (int, float)) and not isinstance(theta, bool)
        return {"rope_theta": theta, "rope_type": "default"} if ok else None
    if isinstance(rope, dict) and set(rope) == {"rope_theta", "rope_type"}:
        return rope if rope["rope_type"] == "default" else None
    return None


def _device(name: str, max_memory: Any) -> str | None:
    """The device type ``train.device`` names on this machine, as the plan picks it, where it
    can be told without torch (``auto`` with a torch built without CUDA: the CPU); a GPU's free
    memory needs torch, so a CUDA plan is drafted only with ``train.max_memory``."""
    if name == "cpu" or name == "mps":
        return name
    if re.fullmatch(r"cuda(:\d+)?", name) and max_memory:
        return "cuda"
    if name == "auto" and _torch_without_gpu():
        return "cpu"
    return None


def _torch_without_gpu() -> bool:
    """Whether the installed torch is built without CUDA and ROCm (its ``version.py`` read,
    not imported): then ``torch.cuda.is_available()`` is False on any machine."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return False
    try:
        text = (Path(spec.origin).parent / "version.py").read_text()
    except OSError:
        return False
    return all(re.search(rf"^{k}\s*(:[^=]*)?=\s*None\s*$", text, re.M) for k in ("cuda", "hip"))


def _shape(raw: dict[str, Any], tensors: dict[str, Tensor]) -> Shape | None:
    """The :class:`Shape` of the model the headers hold (its parameters, the largest decoder
    block's), the widths from the config; None when the headers' blocks are not the config's
    layers (then the model built from the config is what counts)."""
    if raw.get("tie_word_embeddings", False):  # the meta model counts the shared matrix once
        tensors = {k: t for k, t in tensors.items() if k != "lm_head.weight"}
    blocks: dict[str, int] = {}
    for name, tensor in tensors.items():
        found = LAYER.search(name)
        if found:
            blocks[found[1]] = blocks.get(found[1], 0) + tensor.numel
    if sorted(blocks, key=int) != [str(i) for i in range(raw["num_hidden_layers"])]:
        return None
    heads, hidden = raw["num_attention_heads"], raw["hidden_size"]
    head_dim = raw.get("head_dim") or hidden // heads
    return Shape(
        params=sum(t.numel for t in tensors.values()),
        layer_params=max(blocks.values()),
        layers=raw["num_hidden_layers"],
        hidden=hidden,
        heads=heads,
        kv=(raw.get("num_key_value_heads") or heads) * head_dim,
        inner=raw["intermediate_size"],
        vocab=raw["vocab_size"],
    )
