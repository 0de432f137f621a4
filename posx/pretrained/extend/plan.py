"""The plan of ``posx extend hf:NAME_OR_DIR``: the model found and checked under ``posx eval
hf:``'s trust rules, the method's scaling set in its config, the lengths, the processes and the
memory each needs, all before any weight is loaded. ``--dry-run`` prints it; a plan that cannot
fit is refused in one line with settings that would."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from posx.errors import ConfigError, PosxWarning
from posx.pretrained import load
from posx.pretrained.extend.memory import Layout, Shape, describe, estimate, fitting, model_shape
from posx.pretrained.extend.method import Method, check_family, extended_config, read_method
from posx.pretrained.extend.preview import extension_label, fingerprint, identity
from posx.pretrained.extend.settings import Options
from posx.pretrained.naming import model_label, trained_length
from posx.pretrained.scaling import rope_parameters
from posx.runs.resources import available_bytes, gib, parse_size
from posx.runtime.distributed import World, pick_device


@dataclass
class Plan:
    """What an extension will do.

    Attributes:
        word: ``hf:NAME_OR_DIR``.
        values: The settings.
        source: The base model's files.
        trust: Whether it may run its own code.
        method: The fine-tuning method.
        config: The base's config with the method's scaling.
        trained: The base's trained context (tokens).
        length: The target length.
        window: The length fine-tuned at (the target, or the trained context for PoSE and
            the control).
        world: The processes.
        device: This process's device.
        bf16: bf16 mixed precision.
        shape: What the memory estimate reads of the model.
        layout: How one process trains (what the estimate reads of the settings).
        parts: The estimate per process, by part (bytes).
        label: The row label: ``BASE+yarn×4+ft@16384``.
    """

    word: str
    values: dict[str, Any]
    source: load.Source
    trust: bool
    method: Method
    config: Any
    trained: int
    length: int
    window: int
    world: World
    device: torch.device
    bf16: bool
    shape: Shape
    layout: Layout
    parts: dict[str, int]
    label: str

    @property
    def need(self) -> int:
        """Estimated bytes per process."""
        return sum(self.parts.values())

    def identity(self) -> str:
        """12 hex naming the run (:func:`~posx.pretrained.extend.preview.identity`)."""
        return identity(self.source.revision, self.values)

    def fingerprint(self) -> str:
        """16 hex naming the configuration, the seed left out
        (:func:`~posx.pretrained.extend.preview.fingerprint`)."""
        return fingerprint(self.source.revision, self.values)

    def lines(self) -> list[str]:
        """The plan for ``--dry-run``, one fact a line."""
        v, w = self.values, self.world.size
        accum = v["train.batch_size"] // (w * v["train.micro_batch"])
        return [
            f"model      {self.source.name} ({self.config.model_type}, "
            f"{parameters(self.shape.params)} parameters, revision {self.source.revision[:16]})",
            f"method     extension={self.method.name}: rope_parameters "
            f"{json.dumps(rope_parameters(self.config))}",
            f"lengths    trained context {self.trained}, target {self.length}, fine-tuned at "
            f"windows of {self.window}",
            f"steps      {v['extend.steps']} x {v['train.batch_size']} windows "
            f"({v['extend.steps'] * v['train.batch_size'] * self.window:,} tokens), lr "
            f"{v['extend.lr']:g}, warmup {v['extend.warmup_steps']}",
            f"processes  {w} on {self.device.type} ({'FSDP2, sharded' if w > 1 else 'one'}), "
            f"micro-batch {v['train.micro_batch']}, accumulation {accum}, "
            f"{'bf16 mixed' if self.bf16 else 'fp32'}, activation checkpointing "
            f"{'on' if v['train.checkpointing'] else 'off'}",
            f"memory     per process: {describe(self.parts)}",
        ]


def parameters(count: int) -> str:
    """A parameter count as people write it: ``6.74B``, ``1.2M``, ``35.1K`` (a tiny model's
    count read ``0.00B``)."""
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= size:
            return f"{count / size:.{2 if suffix == 'B' else 1}f}{suffix}"
    return str(count)


def _device(values: dict[str, Any], world: World, dry_run: bool) -> torch.device:
    name = str(values["train.device"])
    if dry_run and name.startswith("cuda") and not torch.cuda.is_available():
        return torch.device(name)  # a plan for a GPU machine, made elsewhere
    return pick_device(name, world)


def make_plan(word: str, values: dict[str, Any], options: Options, world: World) -> Plan:
    """Finds and checks the model and the method and estimates the memory; loads no weights.

    Raises:
        ConfigError: A missing, weight-less or custom-code model, a method its family does not
            support, lengths that extend nothing, or a batch the processes cannot share.
    """
    transformers = load.require_transformers("extending")
    method = read_method(str(values["extension"]), options.config_dirs)
    source = load.find_model(word, options.revision, options.allow_download,
                             weights=not options.dry_run)  # fmt: skip
    trust = load.check_code(source, options.trust_remote_code, load.known_model_types())
    base = load.load_config(source, trust)
    trained, _ = trained_length(base, None)
    factor = float(values["extend.factor"])
    length = int(values["extend.length"] or round(factor * trained))
    if values["extend.length"] and length != round(factor * trained) and world.is_main:
        warnings.warn(  # as `posx extend RUN` says the same contradiction
            f"extend.length={length} is {length / trained:g}× the trained context {trained} of "
            f"{source.name}, but extend.factor={factor:g} says {round(factor * trained)}: "
            f"fine-tuning at {length} with the scaling's factor {factor:g}",
            PosxWarning,
            stacklevel=2,
        )
    if length <= trained and (method.at_target or method.pose_chunks):
        raise ConfigError(
            f"extend.length={length} is not longer than the trained context of "
            f"{source.name} ({trained}); raise extend.factor or extend.length"
        )
    config = extended_config(base, method, factor, trained, length)
    size = int(values.get("train.world_size") or world.size)
    if options.dry_run:
        world = World(0, size, 0)
    elif size != world.size:
        raise ConfigError(f"train.world_size={size}, but torchrun started {world.size} processes")
    device = _device(values, world, options.dry_run)
    if values["train.batch_size"] % (world.size * values["train.micro_batch"]):
        raise ConfigError(
            f"train.batch_size ({values['train.batch_size']}) must be a multiple of the "
            f"{world.size} process(es) x train.micro_batch ({values['train.micro_batch']})"
        )
    precision = values["train.precision"]
    bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda")
    try:
        with torch.device("meta"):
            meta = transformers.AutoModelForCausalLM.from_config(config, trust_remote_code=trust)
    except Exception as err:  # noqa: BLE001 - a config transformers cannot build
        raise ConfigError(f"cannot build {config.model_type} from its config: {err}") from err
    check_family(meta, config, method)
    shape = model_shape(meta, config)
    window = length if method.at_target else trained
    layout = Layout(window, values["train.micro_batch"], world.size, values["train.checkpointing"],
                    2 if bf16 else 4,
                    getattr(config, "_attn_implementation", None) == "eager")  # fmt: skip
    parts = estimate(shape, layout)
    label = extension_label(model_label(source.name, None), method, factor, window)
    return Plan(word, values, source, trust, method, config, trained, length, window, world,
                device, bf16, shape, layout, parts, values["label"] or label)  # fmt: skip


def check_fits(plan: Plan) -> None:
    """Refuses a plan whose estimate exceeds ``train.max_memory`` or the device's free memory,
    naming settings that would fit.

    Raises:
        ConfigError: One line: the estimate, the room, and what would fit.
    """
    limit = parse_size(plan.values["train.max_memory"], "train.max_memory")
    found = (limit, f"the limit of {gib(limit)} you set") if limit else available_bytes(
        plan.device
    )  # fmt: skip
    if found is None or plan.need <= found[0]:
        return
    room, where = found
    better = fitting(plan.shape, plan.layout, room)
    hint = (
        f"would fit: {better[0]} ({gib(better[1])} per process)"
        if better
        else "no number of processes fits it: shorten extend.length"
    )
    raise ConfigError(
        f"extending {plan.source.name} at windows of {plan.window} tokens needs about "
        f"{gib(plan.need)} per process ({plan.world.size} process(es)), more than {where}; "
        f"{hint} (posx extend ... --dry-run prints the plan)"
    )
