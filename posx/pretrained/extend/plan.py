"""The plan of ``posx extend hf:NAME_OR_DIR``: the model found and checked under ``posx eval
hf:``'s trust rules, the method's scaling set in its config, the lengths, the processes and the
memory each needs, all before any weight is loaded. ``--dry-run`` prints it; a plan that cannot
fit is refused in one line with settings that would."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from posx.errors import ConfigError
from posx.pretrained import load
from posx.pretrained.extend.longlora import check_length, check_targets, trainable_count
from posx.pretrained.extend.lora_spec import LoraSpec
from posx.pretrained.extend.memory import Layout, Shape, check_room, estimate, model_shape, room
from posx.pretrained.extend.method import Method, check_family, extended_config, read_method
from posx.pretrained.extend.outline import Outline, check_batch, lengths
from posx.pretrained.extend.preview import extension_label, fingerprint, identity
from posx.pretrained.extend.settings import Options
from posx.pretrained.naming import model_label, trained_length
from posx.pretrained.scaling import rope_parameters
from posx.runs.resources import available_bytes
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

    def outline(self) -> Outline:
        """The facts ``--dry-run`` prints."""
        return Outline(self.source.name, self.config.model_type, self.shape.params,
                       self.source.revision, self.method.name, rope_parameters(self.config),
                       self.trained, self.length, self.window, self.values, self.world.size,
                       self.device.type, self.bf16, self.parts,
                       self.shape.trainable)  # fmt: skip

    def lines(self) -> list[str]:
        """The plan for ``--dry-run``, one fact a line."""
        return self.outline().lines()


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
    factor, length, window = lengths(values, trained, source.name, method, world.is_main)
    config = extended_config(base, method, factor, trained, length)
    size = int(values.get("train.world_size") or world.size)
    if options.dry_run:
        world = World(0, size, 0)
    elif size != world.size:
        raise ConfigError(f"train.world_size={size}, but torchrun started {world.size} processes")
    device = _device(values, world, options.dry_run)
    check_batch(values, world.size)
    precision = values["train.precision"]
    bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda")
    try:
        with torch.device("meta"):
            meta = transformers.AutoModelForCausalLM.from_config(config, trust_remote_code=trust)
    except Exception as err:  # noqa: BLE001 - a config transformers cannot build
        raise ConfigError(f"cannot build {config.model_type} from its config: {err}") from err
    check_family(meta, config, method)
    if method.lora is not None:  # LoRA's targets, S²-Attn's groups
        check_longlora(meta, method.lora, length if method.at_target else trained)
    shape = model_shape(meta, config)
    if method.lora is not None:  # only the adapters, embeddings and norms carry optimizer state
        shape = replace(shape, trainable=trainable_count(meta, method.lora))
    layout = Layout(window, values["train.micro_batch"], world.size, values["train.checkpointing"],
                    2 if bf16 else 4,
                    getattr(config, "_attn_implementation", None) == "eager")  # fmt: skip
    parts = estimate(shape, layout)
    label = extension_label(model_label(source.name, None), method, factor, window)
    return Plan(word, values, source, trust, method, config, trained, length, window, world,
                device, bf16, shape, layout, parts, values["label"] or label)  # fmt: skip


def check_longlora(meta: torch.nn.Module, spec: LoraSpec, window: int) -> None:
    """What LongLoRA needs of the model and the length, before anything runs (any number of
    processes: FSDP2 shards the adapted model).

    Raises:
        ConfigError: ``peft`` missing, no target projections, a length S²-Attn cannot group.
    """
    try:
        import peft  # noqa: F401
    except ImportError as err:
        raise ConfigError("extension=longlora needs peft: pip install 'posx[longlora]'") from err
    check_targets(meta, spec)
    check_length(window, spec)


def check_fits(plan: Plan) -> None:
    """Refuses a plan whose estimate exceeds ``train.max_memory`` or the device's free memory,
    naming settings that would fit.

    Raises:
        ConfigError: One line: the estimate, the room, and what would fit.
    """
    found = room(plan.values["train.max_memory"], lambda: available_bytes(plan.device))
    check_room(plan.shape, plan.layout, found, plan.source.name)
