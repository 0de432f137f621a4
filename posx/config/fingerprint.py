"""What makes two runs the same experiment: a fingerprint of the resolved config.

Two runs are replicates of one experiment when their configs agree on every key except the
seed and the keys in :data:`NOT_IDENTITY` (where files go, how often to log, which lengths to
evaluate: nothing that changes a trained weight or a reported number). The fingerprint is a
short SHA-256 of those keys, so a report can group runs by their whole configuration, count
distinct seeds, and refuse to average two different models that happen to share a label.

Configs are first merged onto the typed schema, so a run saved before a key was added compares
equal to a new run that leaves the key at its default.

Two facts that a config does not hold are part of the identity too, as ``run.json`` records
them (:func:`with_records`): what ``precision=auto`` resolved to where the run trained (bf16 on
CUDA, fp32 elsewhere: the config's ``train.precision`` and ``eval.precision`` become that), and
what identifies the data it read (``data.*``: the corpus's checksum and sizes, the BPE's hash:
``corpus: stdlib`` is the running Python's sources, a file or a dataset can change). A run that
recorded neither (trained before posx recorded them) keeps the identity of its config alone.

One output is in a config: the LongRoPE factors that ``posx extend`` searched on each parent
(recorded by ``extend.longrope.searched``). Such a run is identified by the search's settings,
not by the factors it found (:data:`SEARCH_OUTPUTS`); factors set by hand stay a setting.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from posx.config.keys import at_or_below
from posx.config.schema import PosxConfig
from posx.runtime.precision import PRECISIONS, precision_name

Scalar = str | int | float | bool | None
# Part of the hash: a change of the rules below changes every fingerprint. 2: the resolved
# precision and the data's checksums joined the identity; four keys proven not to change a
# number left it.
FINGERPRINT_VERSION = 2
FINGERPRINT_CHARS = 12
# The identity's node of what identifies a run's data (not a config key: from run.json).
DATA = "data"
# What identifies the data in run.json's `task_info` (text tasks record them): the corpus's
# checksum and sizes (train + validation bytes), and a BPE tokenizer's hash.
DATA_KEYS = ("corpus_crc32", "corpus_bytes", "val_bytes", "tokenizer_sha256")
# A device `auto` precision can resolve on (what torch.device accepts of train.device's values).
DEVICE_NAME = re.compile(r"cpu|mps|cuda(:\d+)?")
# Where run.json records what each config node's `precision` resolved to.
RECORDED_PRECISION = {"train": "train_precision", "eval": "eval_precision"}

# Settings added after runs using their node were first saved, whose null means what runs did
# before: an older config lacks them, and its fingerprint stays what it was when it was written
# (extensions; a learned table's init_std, null: 0.02).
ADDED_LATER = ("extend.parent_length", "extend.base_factor", "encoding.init_std")

# Keys (and everything below them) that do not identify an experiment, with the reason.
NOT_IDENTITY: dict[str, str] = {
    "seed": "the replicate: runs that differ only in seed are one experiment",
    "root": "where results are written",
    "invocation": "when and by which `posx train` call the run was started",
    "label": "the name the run is shown under (rows are grouped by it anyway)",
    "chosen": "which yaml options were chosen (their content is what counts)",
    "experiment_name": "the preset the run came from (its settings are what counts)",
    "design": "read by option yamls through interpolations: what it changes is in their keys",
    "eval.variants": "which eval-time variants were evaluated (each row records its overrides)",
    "hydra": "output directories and launcher settings",
    # An extension's parent is in its identity by its fingerprint (extend.parent_fingerprint):
    # the seeds of one extension start from different replicates of one parent experiment.
    "extend.parent": "where the parent run is (its identity is extend.parent_fingerprint)",
    "extend.parent_sha256": "which replicate of the parent: one per seed (recorded in run.json)",
    "extend.parent_step": "the parent's last step (its train.steps, in its fingerprint)",
    # Unless the launch's search found the factors (extend.longrope.searched: SEARCH_OUTPUTS).
    "extend.longrope": "LongRoPE's search settings of a run whose factors were set by hand: "
    "they are in the identity as encoding.scaling.factors",
    "train.device": "where it ran (recorded per eval row as `device`); what it changes, the "
    "precision `auto` resolves to, is in the identity as train.precision and eval.precision",
    "train.threads": "CPU threads",
    "train.progress": "progress bar",
    "train.progress_every": "progress line interval",
    "logger": "experiment trackers the run reports to",
    "train.log_every": "logging interval",
    "train.checkpoint_every": "checkpoint interval (resuming is exact)",
    "train.resume": "whether an interrupted run was resumed",
    "train.eval_at_end": "whether evaluation followed training",
    "eval.lengths": "which lengths were evaluated (each row records its length)",
    "eval.batch_tokens": "evaluation batch size",
    "eval.buckets": "position buckets of eval_positions.csv",
    "eval.mode": "recorded per eval row (`mode`)",
    "eval.window": "recorded per eval row (`window`)",
    "eval.stride": "recorded per eval row (`stride`)",
    # Proven not to change a number (each test is named; test_fingerprint.py checks it exists).
    "model.attn_block_size": "query block of the blocked kernel; outputs do not depend on it: "
    "tests/unit/model/test_attention_kernels.py::"
    "test_model_output_does_not_depend_on_the_block_size, "
    "tests/unit/training/test_identity_keys.py::test_attn_block_size_does_not_change_a_run",
    "model.attention_kernel": "blocked or FlexAttention, the same numbers: "
    "tests/unit/training/test_identity_keys.py::test_attention_kernel_does_not_change_a_run, "
    "tests/unit/model/test_attention_kernels.py::test_flex_score_mod_gradients_equal_blocked, "
    "tests/unit/model/test_attention_flex_scores.py::"
    "test_the_model_through_flex_attention_equals_the_default, "
    "tests/unit/encodings/test_flex_scores.py::test_dense_flex_gradients_equal_attends",
    "train.max_memory": "a limit checked before training, read by nothing else: "
    "tests/unit/training/test_identity_keys.py::test_max_memory_does_not_change_a_run",
    "train.compile": "torch.compile of the same computation: "
    "tests/unit/training/test_train_precision.py::test_compiled_training_matches_eager",
}

# A run whose LongRoPE factors `posx extend` searched (its extend.longrope.searched, set by the
# launch alongside the factors): the search's settings (extend.longrope) are its identity, and
# what the search found is an output of each replicate, as its weights are (each seed's parent
# finds its own factors). They stay in its config and in run.json's extension.encoding.
SEARCHED = "extend.longrope.searched"
SEARCH_SETTINGS = "extend.longrope"
SEARCH_OUTPUTS: dict[str, str] = {
    "encoding.scaling.factors": "found by the search on each replicate's parent (its settings, "
    "extend.longrope, are the identity)",
}


def _container(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """``cfg`` as plain data: merged onto the schema where it fits, interpolations resolved."""
    node = cfg if isinstance(cfg, DictConfig) else OmegaConf.create(dict(cfg))
    # The data node is not in the schema: set aside, so that the rest still merges onto it.
    recorded = node.get(DATA) if DATA in node else None
    if recorded is not None:
        node = node.copy()
        with open_dict(node):
            del node[DATA]
    # A config that does not fit the schema (not posx's, or from a schema since changed) is
    # compared as it is.
    with contextlib.suppress(OmegaConfBaseException):
        node = OmegaConf.merge(OmegaConf.structured(PosxConfig), node)
    try:
        data = OmegaConf.to_container(node, resolve=True, throw_on_missing=False)
    except OmegaConfBaseException:  # e.g. a resolver only Hydra's app registers
        data = OmegaConf.to_container(node, resolve=False)
    assert isinstance(data, dict)
    if recorded is not None:
        data[DATA] = OmegaConf.to_container(recorded) if OmegaConf.is_config(recorded) else recorded
    return data


def _flatten(value: Any, prefix: str, out: dict[str, Scalar]) -> None:
    if isinstance(value, Mapping):
        for key in sorted(value, key=str):
            _flatten(value[key], f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(value, list | tuple):
        out[prefix] = json.dumps(list(value), sort_keys=True, default=str)
    elif value is None or isinstance(value, str | int | float | bool):
        out[prefix] = value
    else:
        out[prefix] = str(value)


def flat_config(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Scalar]:
    """Every leaf of the resolved config under its dotted key, e.g. ``{"train.steps": 1000}``.

    Lists become their JSON text (``"[64, 128]"``), so every value is a scalar.
    """
    out: dict[str, Scalar] = {}
    _flatten(_container(cfg), "", out)
    return out


def is_identity_key(key: str) -> bool:
    """Whether ``key`` tells experiments apart (see :data:`NOT_IDENTITY`)."""
    return not at_or_below(key, NOT_IDENTITY)


def _known_precision(flat: Mapping[str, Scalar]) -> Scalar:
    """``train.precision``, or what ``auto`` resolves to where ``train.device`` says it ran
    (``cuda``: bf16, ``cpu``: fp32); ``auto`` when the device was ``auto`` too (not known)."""
    precision, device = flat.get("train.precision"), flat.get("train.device")
    if precision != "auto" or not isinstance(device, str) or device == "auto":
        return precision
    if not DEVICE_NAME.fullmatch(device):  # not a device name: validation says so, not this
        return precision
    return precision_name("auto", device)


def identity_config(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Scalar]:
    """:func:`flat_config` without the keys that do not identify an experiment, with
    ``train.precision=auto`` resolved where an explicit ``train.device`` decides it; for an
    extension whose LongRoPE factors were searched (:data:`SEARCHED`), the search's settings
    in place of the factors it found (:data:`SEARCH_OUTPUTS`)."""
    flat = flat_config(cfg)
    if flat.get("extend.parent") is None:  # trained from scratch: as before extensions existed
        flat = {k: v for k, v in flat.items() if not k.startswith("extend.")}
    for key in ADDED_LATER:  # unset in a run saved before they existed: as it was then
        if flat.get(key) is None:
            flat.pop(key, None)
    if "train.precision" in flat:
        flat["train.precision"] = _known_precision(flat)
    if flat.get("extend.parent") is not None and flat.get(SEARCHED) is True:
        return {
            k: v
            for k, v in flat.items()
            if (is_identity_key(k) or at_or_below(k, (SEARCH_SETTINGS,)))
            and not at_or_below(k, SEARCH_OUTPUTS)
        }
    return {k: v for k, v in flat.items() if is_identity_key(k)}


def _canonical(value: Scalar) -> Scalar:
    # 1 and 1.0 are one setting (a yaml may write either for an open node such as encoding.*).
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def fingerprint_of(identity: Mapping[str, Scalar]) -> str:
    """The fingerprint of an already flattened identity config."""
    canon = {k: _canonical(v) for k, v in identity.items()}
    text = json.dumps({"v": FINGERPRINT_VERSION, "config": canon}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:FINGERPRINT_CHARS]


def config_fingerprint(cfg: DictConfig | Mapping[str, Any]) -> str:
    """Short hex SHA-256 of the config without seed, output paths and bookkeeping keys."""
    return fingerprint_of(identity_config(cfg))


def data_identity(task_info: Any) -> dict[str, Scalar]:
    """What identifies a run's data, from a task's description (``run.json``'s ``task_info``
    or :meth:`~posx.tasks.base.Task.describe`): :data:`DATA_KEYS` that it has."""
    if not isinstance(task_info, Mapping):
        return {}
    return {
        k: task_info[k]
        for k in DATA_KEYS
        if isinstance(task_info.get(k), str | int) and not isinstance(task_info[k], bool)
    }


def with_records(cfg: DictConfig, info: Mapping[str, Any]) -> DictConfig:
    """``cfg`` with what ``run.json`` (``info``) records about how the run ran: each ``auto``
    precision replaced by what it resolved to, and the data's identity under ``data``.

    Args:
        cfg: The run's config (saved by Hydra, or composed).
        info: The run's ``run.json`` (``{}`` when it has none: ``cfg`` comes back as it is).
    """
    cfg = copy.deepcopy(cfg)  # the caller's config stays as it was
    with open_dict(cfg):
        for group, field in RECORDED_PRECISION.items():
            node, value = cfg.get(group), info.get(field)
            # an explicit precision is what ran; only `auto` depended on the device
            auto = isinstance(node, DictConfig) and node.get("precision", "auto") == "auto"
            if auto and value in PRECISIONS[1:]:
                node.precision = value
        data = data_identity(info.get("task_info"))
        if data:
            cfg[DATA] = data
    return cfg
