"""Typed config schemas: registered in Hydra's ConfigStore (``posx.config.compose.register``), they
make a misspelled key or a wrong type an error at composition time. ``encoding`` and ``task`` stay
open (``_target_`` plus the constructor's own arguments), so a user can point ``_target_`` at their
own class; their arguments are checked when they are instantiated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModelConfig:
    """Decoder-only Transformer dimensions."""

    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int = 256
    dropout: float = 0.0
    tie_embeddings: bool = True
    # the token embedding's initial N(0, std); None: 0.02 (every run before the setting)
    embed_init_std: float | None = None
    attn_block_size: int = 256
    attention_kernel: str = "auto"  # bias encodings: auto (flex on CUDA), blocked or flex


@dataclass
class TrainConfig:
    """Optimisation and bookkeeping for one training run."""

    length: int = 64
    steps: int = 1000
    batch_size: int = 32
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    log_every: int = 10
    checkpoint_every: int = 0
    eval_at_end: bool = True
    device: str = "auto"
    # auto: bf16 autocast on CUDA, fp32 elsewhere; fp32, bf16 or fp16 (with a gradient scaler)
    # on any device, so the mixed-precision path also runs on a CPU when asked
    precision: str = "auto"
    fused_adamw: bool | None = None  # None: fused AdamW on CUDA only
    compile: bool = False  # torch.compile the model for training
    threads: int = 0
    progress: bool = True
    progress_every: float = 10.0  # seconds between plain progress lines (posx.log, piped stdout)
    resume: bool = False
    # Memory a training step (and the evaluation after it) may use, e.g. 8G; None: what is
    # available. Checked against an estimate before anything is allocated (posx.runs.resources).
    max_memory: str | None = None


@dataclass
class EvalConfig:
    """Length sweep: which lengths, how much held-out data, in what batches."""

    # None: 1x, 2x, 4x and 8x train.length (see eval_lengths), so there is always an
    # in-distribution column to take ratios against.
    lengths: list[int] | None = None
    tokens: int = 16384
    batch_tokens: int = 8192
    seed: int = 1234
    mode: str = "full"  # full | sliding (see posx/evaluation/protocol.py)
    window: int | None = None  # sliding: tokens the model reads at once (default train.length)
    stride: int | None = None  # sliding: tokens each window moves on (default window // 2)
    buckets: str = "log"  # per-position loss buckets: log (powers of two) or a width in tokens
    precision: str = "auto"  # as train.precision; every eval row records what it resolved to
    # Eval-time variants evaluated after training, each a list of `key=value` overrides
    # (`[[encoding.scaling.type=yarn, encoding.scaling.factor=4]]`): rows as `posx eval RUN
    # OVERRIDES` writes them, each recording its overrides (posx/runs/variants.py).
    variants: list[list[str]] = field(default_factory=list)


@dataclass
class LongRopeSearchConfig:
    """``extension=longrope``: the evolutionary search of per-dimension RoPE factors that runs
    before the fine-tuning (posx/runs/extend/longrope.py; the sizes of
    posx/evaluation/longrope_search.py), scored on ``windows`` training batches of the target
    length (the held-in data)."""

    population: int = 8
    parents: int = 4
    mutations: int = 4
    crossovers: int = 2
    iterations: int = 3
    step: float = 0.01
    seed: int = 0
    windows: int = 2
    # Set by posx extend (never by hand) on a launch whose encoding.scaling.factors the search
    # found: the factors are then an output of each replicate, and these settings, not the
    # factors, are the run's identity (posx/config/fingerprint.py).
    searched: bool = False


@dataclass
class ExtendConfig:
    """What an extension run (``posx extend PARENT``) starts from: set by ``posx extend``, not
    by hand. Empty (``parent`` None) for a run trained from scratch."""

    parent: str | None = None  # the parent run's directory (its final weights are the start)
    # What the parent was when the extension started: its model.safetensors' SHA-256 (checked
    # again when training starts), its fingerprint (part of this run's identity), its label
    # in reports, the step its checkpoint was at, and its training length.
    parent_sha256: str = ""
    parent_fingerprint: str = ""
    parent_label: str = ""
    parent_step: int = 0
    # The length the weights' positions were first trained at (the first ancestor's
    # train.length): the encoding's `train_length` (RoPE's scaling.original_length default).
    base_length: int | None = None
    # The parent's train.length, and the scaling's factor over the first base's positions
    # (factor x parent_length / base_length: a chain 32 -> 128 -> 512 is yarn×4, then yarn×16).
    parent_length: int | None = None
    base_factor: float | None = None
    # The fine-tuning the methods of configs/extension/ read (`extension=yarn`): the factor
    # over the parent's train.length, the length to fine-tune at (PoSE: the target its
    # positions spread over; null: factor x the parent's train.length, set by posx extend),
    # and a fresh schedule of `steps` with `lr` and `warmup_steps` (the same for every method).
    factor: float = 4.0
    length: int | None = None
    steps: int = 200
    lr: float = 1e-3
    warmup_steps: int = 20
    # A parameter whose shape the overrides change (learned's table when train.length grows):
    # none (refuse), interpolate (resample the rows to the new count) or copy (tile the rows).
    resize: str = "none"
    longrope: LongRopeSearchConfig = field(default_factory=LongRopeSearchConfig)


@dataclass
class PosxConfig:
    """The whole config of a run (the root node): the typed groups and the open ones."""

    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    encoding: Any = None
    task: Any = None
    positions: Any = None  # training-time position strategy (configs/positions/)
    logger: Any = field(default_factory=dict)  # experiment trackers (configs/logger/)
    seed: int = 0
    root: str = "results"
    # ``<start time>_<random id>`` of the ``posx train`` invocation, which names its run or sweep
    # directory. It travels in the config (as an override) so that launcher workers (joblib,
    # submitit), which resolve ``hydra.sweep.dir`` again on their side, agree on it.
    invocation: str = ""
    # The run's encoding label in its directory, run.json and reports (empty: the chosen yaml's
    # name, or the class name of a `_target_` set over it; see run_names).
    label: str = ""
    # Filled in by posx.compose for posx.train: per labelled group, the chosen yaml's name and
    # the `_target_` it sets (`posx train` reads Hydra's record of the choices instead).
    chosen: Any = None
    # The preset a run belongs to (configs/experiment/NAME.yaml sets it): `posx check` finds the
    # preset's claims (configs/claims/NAME.yaml) through it. Recorded in run.json.
    experiment_name: str = ""
    # Design values a preset sets for one option of a group it sweeps, read by that option's yaml
    # through `${oc.select:design.KEY,DEFAULT}` (e.g. T5's max_distance scaled with the training
    # length): a preset cannot set `encoding.max_distance` for t5 alone while it sweeps encodings.
    design: Any = field(default_factory=dict)
    # The parent run an extension starts from (``posx extend``; configs/extension/).
    extend: ExtendConfig = field(default_factory=ExtendConfig)


# The typed nodes of a config: their keys are fixed by their dataclass.
TYPED_NODES = (("", PosxConfig), ("model", ModelConfig), ("train", TrainConfig),
                ("eval", EvalConfig), ("extend", ExtendConfig))  # fmt: skip
