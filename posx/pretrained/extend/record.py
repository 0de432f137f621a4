"""What an extension's ``run.json`` records: what it is, where it came from (its base's run
and fingerprint, so ``posx check`` pairs the two), how it was trained, and LongLoRA's adapters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from posx.pretrained import load
from posx.pretrained.extend.engine import Engine
from posx.pretrained.extend.longlora import ADAPTER_DIR
from posx.pretrained.extend.plan import Plan
from posx.pretrained.naming import model_fingerprint, model_label
from posx.pretrained.naming import run_directory as evaluated_run_directory
from posx.pretrained.run import tokenizer_identity
from posx.pretrained.scaling import rope_parameters
from posx.storage.results import SCHEMA_VERSION, write_json

MODEL_DIR = "model"


def parent_key(plan: Plan, tokenizer: Any) -> dict[str, str]:
    """The base's ``run`` and ``fingerprint`` as its own ``run.json`` records them, so that
    ``posx check`` pairs the extension with its base (:mod:`posx.claims.lineage`): the run
    ``posx eval hf:`` writes for the model, or, for posx's own extension, that run."""
    own = plan.source.path.parent / "run.json"
    if plan.source.path.name == MODEL_DIR and own.is_file():
        try:
            info = json.loads(own.read_text())
        except (OSError, ValueError):
            info = None
        if isinstance(info, dict) and info.get("extension") and info.get("fingerprint"):
            return {"run": plan.source.path.parent.name, "fingerprint": str(info["fingerprint"])}
    label = model_label(plan.source.name, None)
    sha = tokenizer_identity(tokenizer)["sha256"]
    return {"run": evaluated_run_directory(Path("."), label, plan.source.revision).name,
            "fingerprint": model_fingerprint(plan.source.revision, sha)}  # fmt: skip


def run_record(
    plan: Plan, run: Path, corpus: dict[str, Any], parent: dict[str, str]
) -> dict[str, Any]:
    """``run.json`` of the extension: what it is, where it came from (``parent``: the base's
    run and fingerprint, :func:`parent_key`), how it was trained."""
    v = plan.values
    info: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "run": run.name, "encoding": plan.label,
        "task": "text", "model": "pretrained", "seed": v["seed"], "train_length": plan.window,
        "fingerprint": plan.fingerprint(), "steps": v["extend.steps"],
        "pretrained": {"model_id": str(run / MODEL_DIR), "architecture": plan.config.model_type,
                       "parameters": plan.shape.params},
        "parent": {**parent, "model_id": plan.source.name,
                   "path": str(plan.source.path), "revision": plan.source.revision,
                   "trained_length": plan.trained,
                   "rope_parameters": rope_parameters(load.load_config(plan.source, plan.trust))},
        "extension": {"word": plan.word, "method": plan.method.name, "scaling":
                      plan.method.scaling, "factor": float(v["extend.factor"]),
                      "length": plan.length, "window": plan.window,
                      "pose_chunks": plan.method.pose_chunks, "steps": v["extend.steps"],
                      "lr": v["extend.lr"], "warmup_steps": v["extend.warmup_steps"],
                      "batch_size": v["train.batch_size"], "micro_batch": v["train.micro_batch"],
                      "checkpointing": v["train.checkpointing"],
                      "precision": "bf16" if plan.bf16 else "fp32",
                      "processes": plan.world.size,
                      "engine": "fsdp2" if plan.world.distributed else "one process",
                      "rope_parameters": rope_parameters(plan.config),
                      "memory_estimate_bytes": plan.need, "settings": v},
        "train_corpus": corpus,
    }  # fmt: skip
    if v["experiment"]:
        info["experiment"] = str(v["experiment"])
    return info


def record_lora(plan: Plan, engine: Engine, record: dict[str, Any], run: Path) -> None:
    """LongLoRA's adapters, as the engine's model holds them, recorded in ``run.json``."""
    spec = plan.method.lora
    if spec is None:
        return
    params = dict(engine.model.named_parameters())  # sharded: numel() is the whole tensor's
    lora = sum(p.numel() for n, p in params.items() if "lora_" in n)
    record["extension"]["longlora"] = {
        "rank": spec.rank, "alpha": spec.alpha, "targets": list(spec.targets),
        "trainable": list(spec.trainable), "group_fraction": spec.group_fraction,
        "attention": "S2-Attn in training, full at evaluation",
        "lora_parameters": lora,
        "trainable_parameters": sum(p.numel() for p in params.values() if p.requires_grad),
        "parameters": sum(p.numel() for n, p in params.items() if "lora_" not in n),
        "adapter": str(run / ADAPTER_DIR),
    }  # fmt: skip
    if plan.world.is_main:
        write_json(run / "run.json", {**record, "status": "running", "step": 0})
