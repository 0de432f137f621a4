"""``posx extend hf:NAME_OR_DIR``: fine-tune a pretrained model to a longer context into a run
directory, and ``posx resume`` / ``posx eval`` of that run.

The run lives at ``<root>/pretrained/<label>_<12 hex>/`` (the hex: the base's revision and every
setting that changes training, :meth:`~posx.pretrained.extend.plan.Plan.identity`). It holds
``model/`` (``save_pretrained``: safetensors, the config with the method's RoPE scaling, the
tokenizer beside them), ``metrics.csv`` (the loss per step), ``train_state/`` while training
(the sharded checkpoint ``posx resume`` continues from), and ``run.json``: the base model's id,
path and resolved revision (``parent``), the method, factor, lengths, steps, schedule, processes
and memory estimate (``extension``), the held-in text's identity (``train_corpus``). Once
trained, the model is evaluated on the held-out text as ``posx eval hf:`` evaluates one, into
the same directory, so ``posx report`` and ``posx check`` read it as any run.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from posx.errors import ConfigError, Interrupted, PosxError
from posx.pretrained import load
from posx.pretrained.evaluate import Settings
from posx.pretrained.extend import preview
from posx.pretrained.extend.data import held_in_bytes, tokenize_held_in
from posx.pretrained.extend.engine import Engine, build_engine, full_weights, rebuild, save_model
from posx.pretrained.extend.longlora import ADAPTER_DIR, LoraAdapter, merge, save_adapter
from posx.pretrained.extend.longrope import search_factors
from posx.pretrained.extend.plan import Plan, check_fits, make_plan
from posx.pretrained.extend.record import MODEL_DIR, parent_key, record_lora, run_record
from posx.pretrained.extend.settings import Options
from posx.pretrained.extend.train import (
    STATE_DIR,
    Budget,
    Stopped,
    latest_state,
    load_state,
    make_optimizer,
    train,
)
from posx.pretrained.request import DEFAULTS, Request, check_values
from posx.pretrained.run import evaluate_pretrained
from posx.runtime.distributed import World, init_process_group, leave
from posx.runtime.outcomes import together
from posx.storage.results import check_writable, write_csv, write_json

# what an extension's run.json keeps when its evaluation writes the file again
KEPT = ("status", "steps", "step", "final_loss", "parent", "extension", "train_corpus", "seed",
        "fingerprint")  # fmt: skip
Say = Callable[[str], None]


def run_directory(plan: Plan) -> Path:
    """``<root>/pretrained/<label>_<12 hex>`` (:func:`.preview.run_directory`)."""
    return preview.run_directory(str(plan.values["root"]), plan.label, plan.source.revision,
                                 plan.values)  # fmt: skip


def extend_pretrained(plan: Plan, say: Say) -> Path:
    """Carries out a new extension.

    Raises:
        ConfigError: The run exists already (finished: evaluate it; unfinished: resume it), or
            the plan does not fit.
    """
    run = run_directory(plan)
    # every process has looked before rank 0 writes, and a refusal in one (its own GPU's
    # memory) is every one's, not a wait for ever in the next collective
    with together(plan.world):
        if (run / "run.json").is_file():
            done = (run / MODEL_DIR).is_dir()
            verb = "evaluate it with posx eval" if done else "continue it: posx resume"
            raise ConfigError(f"this extension exists already: {run}; {verb} {run}")
        check_fits(plan)
        check_writable(Path(str(plan.values["root"])))
    return _carry_out(plan, run, say)


def resume_pretrained(run: Path, info: dict[str, Any], options: Options, say: Say) -> Path:
    """Continues an interrupted extension from its last checkpoint (or from the start).

    Raises:
        ConfigError: It finished already, or its base model changed since it started.
    """
    values = preview.resumable(run, info)
    ext, parent = info.get("extension") or {}, info.get("parent") or {}
    hub = not str(parent.get("revision", "")).startswith("dir:")
    options.revision = parent.get("revision") if hub else None
    plan = make_plan(ext["word"], values, options, init_process_group())
    if plan.source.revision != parent.get("revision"):
        raise ConfigError(
            f"the base model {plan.source.name} changed since {run} started (revision "
            f"{plan.source.revision[:16]}, was {str(parent.get('revision'))[:16]}); extend it again"
        )
    with together(plan.world):  # one GPU's refusal is every process's
        check_fits(plan)
    return _carry_out(plan, run, say, resume=True)


def _budget(plan: Plan) -> Budget:
    v = plan.values
    return Budget(v["extend.steps"], float(v["extend.lr"]), v["extend.warmup_steps"],
                  v["train.batch_size"], v["train.micro_batch"], plan.window, plan.length,
                  plan.method.pose_chunks, float(v["train.grad_clip"]),
                  v["train.checkpoint_every"], v["seed"])  # fmt: skip


def _carry_out(plan: Plan, run: Path, say: Say, resume: bool = False) -> Path:
    world, v = plan.world, plan.values
    with together(world):  # the search or the engine's broadcast is next: no rank left waiting
        tokenizer = load.load_tokenizer(plan.source, plan.trust)
        raw, corpus = held_in_bytes(v["task.corpus"], float(v["task.val_fraction"]),
                                    v["task.max_bytes"], v["task.val_corpus"])  # fmt: skip
        text = tokenize_held_in(tokenizer, raw, corpus)
        budget = _budget(plan)
        text.window_count(plan.window)
        record = run_record(plan, run, text.describe, parent_key(plan, tokenizer))
        if world.is_main:
            run.mkdir(parents=True, exist_ok=True)
            write_json(run / "run.json", {**record, "status": "running", "step": 0})
    record = _search_first(plan, text, run, say, tokenizer, record)
    found = latest_state(run / STATE_DIR) if resume else None
    try:
        adapt = LoraAdapter(plan.method.lora, v["seed"]) if plan.method.lora else None
        engine = build_engine(plan.source, plan.config, plan.trust, world, plan.device,
                              plan.bf16, v["train.checkpointing"], adapt)  # fmt: skip
        record_lora(plan, engine, record, run)
        optimizer = make_optimizer(engine, budget)
        start, rows = 0, []
        if found is not None:
            start, rows = load_state(found, engine, optimizer)
            say(f"resuming {run} at step {start}")
    except KeyboardInterrupt:  # Ctrl-C while loading: a run that says so, not a `running` one
        _stopped(run, record, world, found)
        raise Interrupted(f"interrupted before training began; run: posx resume {run}") from None
    every = max(1, budget.steps // 20)
    if world.is_main:
        say(f"training {budget.steps - start} step(s) of {budget.batch} windows of "
            f"{plan.window} tokens")  # fmt: skip

    def progress(row: dict[str, Any]) -> None:
        if world.is_main and (row["step"] % every == 0 or row["step"] == budget.steps):
            say(f"step {row['step']}/{budget.steps} loss {row['loss']:.4f} "
                f"{row['tokens_per_s']:.0f} tok/s")  # fmt: skip

    try:
        rows = train(engine, optimizer, text, budget, run / STATE_DIR, start, rows, progress)
    except Stopped as stop:
        if world.is_main:
            write_csv(run / "metrics.csv", pd.DataFrame(rows))
            write_json(run / "run.json", {**record, "status": "interrupted", "step": stop.step})
        raise Interrupted(
            f"interrupted at step {stop.step}; checkpoint saved; run: posx resume {run}"
        ) from None
    except KeyboardInterrupt:  # a second Ctrl-C: stopped at once, as training says it
        _stopped(run, record, world, latest_state(run / STATE_DIR))
        raise Interrupted(
            f"stopped at once by a second Ctrl-C; resume from the last checkpoint: posx resume "
            f"{run}"
        ) from None
    model, weights = _trained_model(plan, engine, run)
    with together(world):  # rank 0's failed save is every process's error, not a wait
        if world.is_main:
            save_model(model, weights, run / MODEL_DIR, _saved_dtype(plan.source))
            tokenizer.save_pretrained(run / MODEL_DIR)
            write_csv(run / "metrics.csv", pd.DataFrame(rows))
            done = {**record, "status": "extended", "step": budget.steps,
                    "final_loss": rows[-1]["loss"] if rows else None}  # fmt: skip
            write_json(run / "run.json", done)
            shutil.rmtree(run / STATE_DIR, ignore_errors=True)
    leave(world)  # every process is done training: the others go, rank 0 goes on to evaluate
    return run


def _search_first(
    plan: Plan, text: Any, run: Path, say: Say, tokenizer: Any, record: dict[str, Any]
) -> dict[str, Any]:
    """LongRoPE: its factors searched (into ``plan.config``) before the model is built with
    them, and ``run.json`` recording them; other methods: ``record`` as it is."""
    if plan.method.scaling != "longrope":
        return record
    found = search_factors(plan, text.ids, run, say, plan.world)
    record = run_record(plan, run, text.describe, parent_key(plan, tokenizer))
    record["extension"]["longrope"] = found
    with together(plan.world):  # the engine's broadcast is next
        if plan.world.is_main:
            write_json(run / "run.json", {**record, "status": "running", "step": 0})
    return record


def _trained_model(
    plan: Plan, engine: Engine, run: Path
) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """The model to save and its whole weights on rank 0 (``{}`` on the others; every process
    must call it). LongLoRA: its adapter saved beside the model, then merged into the weights;
    under torchrun rank 0 does both on the model rebuilt whole from the gathered shards, so
    the files are those one process writes."""
    if engine.adapted is None:
        return engine.model, full_weights(engine)
    model, peft_model = engine.model, engine.adapted.peft_model
    if plan.world.distributed:
        weights = full_weights(engine)
        if not plan.world.is_main:
            return model, {}
        model, rebuilt = rebuild(plan.config, plan.trust, weights, engine.adapt)
        peft_model = rebuilt.peft_model
    save_adapter(peft_model, model, run / ADAPTER_DIR)
    # the attention the model had before LoRA (a rebuilt one's config may say S²-Attn already)
    merged = merge(peft_model, model, engine.adapted.attention)
    return merged, {k: v.detach().cpu() for k, v in merged.state_dict().items()}


def _stopped(run: Path, record: dict[str, Any], world: World, state: Path | None) -> None:
    """``run.json`` of a run Ctrl-C stopped outside a step: interrupted at its last checkpoint
    (``state``; step 0 without one), so ``posx resume`` continues it."""
    if world.is_main:
        step = int(state.name.split("_")[-1]) if state is not None else 0
        write_json(run / "run.json", {**record, "status": "interrupted", "step": step})


def _saved_dtype(source: load.Source) -> torch.dtype:
    """The dtype the base's weights were saved in (its config's ``dtype``), fp32 if unsaid."""
    name = source.config.get("dtype") or source.config.get("torch_dtype") or "float32"
    found = getattr(torch, str(name), None)
    return found if isinstance(found, torch.dtype) else torch.float32


def evaluate_extension(
    run: Path,
    info: dict[str, Any],
    lengths: list[int] | None,
    on_row: Any = None,
    suites: tuple[str, ...] = ("text",),
    given: dict[str, Any] | None = None,
    processes: World | None = None,
) -> tuple[Path, list[dict[str, Any]]]:
    """Evaluates an extension's model on the held-out text (and/or RULER's tasks, ``suites``)
    into its own run directory, at ``lengths`` (default: its ``eval.lengths``, else the base's
    context and the target); ``given``: ``key=value`` settings of this evaluation
    (``ruler.samples``); ``processes``: those that evaluate (None: torchrun's; one after
    training, whose other processes have left).

    Raises:
        ConfigError: The run has no model (it was not finished).
        PosxError: Its ``run.json`` lacks the extension's lineage.
    """
    if not (run / MODEL_DIR / "config.json").is_file():
        raise ConfigError(f"{run} holds no extended model yet; finish it: posx resume {run}")
    ext, parent = info.get("extension") or {}, info.get("parent") or {}
    v = ext.get("settings") or {}
    if not (isinstance(v, dict) and parent.get("trained_length") and ext.get("length")):
        raise PosxError(f"{run}/run.json is damaged (no extension lineage); it cannot be evaluated")
    asked = lengths or v.get("eval.lengths") or [parent["trained_length"], ext["length"]]
    values = {**DEFAULTS, **{k: v[k] for k in DEFAULTS if k in v}, **(given or {})}
    values.update(train_length=info["train_length"], label=info["encoding"])
    values = check_values(values)
    settings = Settings(lengths=list(asked), tokens=values["eval.tokens"],
                        batch_tokens=values["eval.batch_tokens"])  # fmt: skip
    request = Request(f"hf:{run / MODEL_DIR}", settings, values, root=run.parent.parent,
                      device=str(v.get("train.device", "auto")), run_dir=run,
                      record={k: info[k] for k in KEPT if k in info}, suites=suites,
                      world=processes)  # fmt: skip
    return evaluate_pretrained(request, on_row)
