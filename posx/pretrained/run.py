"""``posx eval hf:NAME_OR_DIR``: evaluate a pretrained causal LM into an ordinary run directory.

The run lives at ``<root>/pretrained/<label>_<revision>/`` (evaluating the same model again
merges rows into it, as ``posx eval`` does for a trained run). ``run.json`` says what was
evaluated: the model id, the resolved revision (the hub commit of a cached snapshot, or a
SHA-256 of a directory's files), the weight format, dtype, device, the tokenizer's identity and
the model's trained context (from its config); ``eval.csv`` and ``eval_positions.csv`` have the
columns of posx's own runs, so ``posx report``, ``posx runs`` and ``posx check`` read it like
any run. The row's ``encoding`` is the model's label, its ``model`` is ``pretrained`` and its
``train_length`` the trained context, so ×r is relative to that context.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from posx.errors import ConfigError
from posx.evaluation.memory import heap_frozen
from posx.pretrained import load
from posx.pretrained.evaluate import evaluate_text
from posx.pretrained.memory import check_pretrained_fits, parameter_count
from posx.pretrained.naming import model_fingerprint, model_label, run_directory, trained_length
from posx.pretrained.passkey import evaluate_passkey
from posx.pretrained.request import Request
from posx.pretrained.ruler.run import GENERATION_KEYS, GENERATIONS, prepare_ruler, run_ruler
from posx.pretrained.scaling import rope_parameters
from posx.pretrained.text import held_out_bytes, tokenize_held_out
from posx.pretrained.track import recorded_loggers, send_rows
from posx.report.data import tokenizer_unit
from posx.runtime.distributed import World, init_process_group, leave, pick_device, world
from posx.runtime.outcomes import together
from posx.storage.results import SCHEMA_VERSION, check_writable, merge_rows, write_json

log = logging.getLogger(__name__)
ROW_KEYS = ["task", "eval_length", "mode", "window", "stride", "overrides"]


def tokenizer_identity(tokenizer: Any) -> dict[str, Any]:
    """Class, vocabulary size and a SHA-256 of the tokenizer's full definition."""
    definition = tokenizer.backend_tokenizer.to_str()
    return {
        "class": type(tokenizer).__name__,
        "vocab_size": len(tokenizer),
        "sha256": hashlib.sha256(definition.encode()).hexdigest(),
        "bos_token": tokenizer.bos_token,
    }


@dataclass
class Loaded:
    """A model ready to evaluate, and what its run records."""

    model: torch.nn.Module
    tokenizer: Any
    source: load.Source
    trained: int
    info: dict[str, Any]
    device: torch.device


def load_for_eval(request: Request) -> Loaded:
    """Finds, checks (code, memory) and loads the model and tokenizer; without lengths asked
    for, the model is evaluated at its trained context and twice that.

    Raises:
        ConfigError: A missing, gated, weight-less or custom-code model, or one that cannot fit.
    """
    transformers = load.require_transformers()
    source = load.find_model(request.word, request.revision, request.allow_download)
    trust = load.check_code(source, request.trust_remote_code, load.known_model_types())
    config = load.load_config(source, trust)
    device = pick_device(request.device, world())
    dtype = load.pick_dtype(request.dtype, device)
    trained, origin = trained_length(config, request.values["train_length"])
    params = parameter_count(config, transformers, trust)
    request.settings.lengths = request.settings.lengths or [trained, 2 * trained]
    longest = max(request.settings.lengths)
    widest = longest if request.settings.mode == "full" else min(
        longest, request.settings.window or trained
    )  # fmt: skip
    need = check_pretrained_fits(
        config, params, dtype, widest, request.settings.batch_tokens, device,
        request.max_memory, source.name,
    )  # fmt: skip
    tokenizer = load.load_tokenizer(source, trust)
    if request.device_map:
        model = load.load_model(source, config, dtype, trust, device_map=request.device_map)
        device = next(model.parameters()).device
    else:
        model = load.load_model(source, config, dtype, trust).to(device)
    info = {
        "model_id": source.name,
        "path": str(source.path),
        "revision": source.revision,
        "weights": source.weights,
        "architecture": config.model_type,
        "parameters": params,
        "dtype": load.dtype_name(dtype),
        "device": str(device),
        "device_map": request.device_map,
        "trust_remote_code": trust,
        "trained_length": trained,
        "trained_length_from": origin,
        "rope_parameters": rope_parameters(config),
        "tokenizer": tokenizer_identity(tokenizer),
        "memory_estimate_bytes": need,
        "transformers": transformers.__version__,
    }
    return Loaded(model, tokenizer, source, trained, info, device)


def processes(request: Request) -> World:
    """This process's place under ``torchrun`` (joining its process group), or a single process
    (also where the request names its processes: ``request.world``).

    Raises:
        ConfigError: Several processes asked for more than RULER, whose samples they share.
    """
    w = request.world or world()
    if not w.distributed:
        return w
    if request.suites != ("ruler",) or request.passkey:
        raise ConfigError(
            "under torchrun, posx eval hf: shares RULER's samples among the processes: use "
            "--suite ruler alone, and evaluate text or --passkey in one process"
        )
    return init_process_group()


def evaluate_pretrained(
    request: Request,
    on_row: Callable[[str, dict[str, Any]], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> tuple[Path, list[dict[str, Any]]]:
    """Evaluates the model of ``request``; writes its run directory and sends the rows to its
    trackers (``request.logger`` and those recorded in its ``run.json``).

    Args:
        request: What was asked.
        on_row: Called with (task, row) after each length (a progress line).
        on_warning: Called with each tracker that could not take the rows.

    Returns:
        The run directory and the rows written.
    """
    check_writable(request.root)
    s, values = request.settings, request.values
    w = processes(request)
    with together(w):  # a model that one process cannot load must not leave the others waiting
        raw, corpus = held_out_bytes(
            values["task.corpus"], float(values["task.val_fraction"]), values["task.max_bytes"],
            values["task.val_corpus"],
        )  # fmt: skip
        loaded = load_for_eval(request)
        label = model_label(loaded.source.name, values["label"])
        run = request.run_dir or run_directory(request.root, label, loaded.source.revision)
        text = tokenize_held_out(loaded.tokenizer, raw, corpus)
        ruler = None
        if "ruler" in request.suites:
            ruler = prepare_ruler(
                loaded.tokenizer, loaded.source.name, loaded.info["tokenizer"]["sha256"], values,
                s.lengths, request.root, text.text,
            )  # fmt: skip
    show = (lambda task: lambda row: on_row(task, row)) if on_row else (lambda task: None)  # noqa: E731
    rows, buckets = [], []
    said: list[dict[str, Any]] = []
    with heap_frozen():  # each length collects garbage first: only what the sweep made
        if "text" in request.suites:
            rows, buckets = evaluate_text(
                loaded.model, text, s, loaded.trained, loaded.device, show("text")
            )
        rows = [{"task": "text", **r} for r in rows]
        buckets = [{"task": "text", **b} for b in buckets]
        if request.passkey:
            keyed = evaluate_passkey(
                loaded.model, loaded.tokenizer, s.lengths, s.variants, loaded.trained,
                loaded.device, values["passkey.trials"], tuple(values["passkey.depths"]),
                values["eval.seed"], show("passkey"),
            )  # fmt: skip
            rows += [{"task": "passkey", **r} for r in keyed]
        if ruler is not None:
            found, said = run_ruler(
                loaded.model, ruler, values, s.variants, loaded.trained, loaded.device,
                s.batch_tokens, (lambda r: on_row(r["task"], r)) if on_row else None,
                w=w,
            )  # fmt: skip
            rows += found
    info = {**_run_json(run, label, loaded, text.describe, values), **request.record}
    chosen = {**recorded_loggers(run), **request.logger}
    if chosen:
        info["logger"] = chosen
    ident = _ident(info, loaded, values)
    rows = [{**ident, **r} for r in rows]
    with together(w):  # under torchrun the first process writes; its failure is every one's
        if w.is_main:
            run.mkdir(parents=True, exist_ok=True)
            write_json(run / "run.json", info)
            merge_rows(run / "eval.csv", rows, ROW_KEYS)
            positions = [{**ident, **b} for b in buckets]
            merge_rows(run / "eval_positions.csv", positions, ROW_KEYS, replaces=rows)
            if said:
                merge_rows(run / GENERATIONS, said, GENERATION_KEYS)
            for problem in send_rows(run, info, rows, chosen, request.sweep_dir):
                (on_warning or _warn)(problem)
    leave(w)  # all together: a process that exits with the group open can abort on the way out
    return run, rows


def progress_line(word: str, task: str, row: dict[str, Any]) -> str:
    """One length's progress line: ``hf:NAME text L=8192 (as saved): loss 2.1034 in 41.2s``
    (a RULER task: ``score 85.00 [63.96, 94.76] of 20 in 3.1s``)."""
    if row["status"] != "ok":
        done = f"{row['status']}: {row['reason']}"
    elif "score" in row:
        done = (
            f"score {row['score']:.2f} [{row['score_low']:.2f}, {row['score_high']:.2f}] of "
            f"{row['samples']} in {row['seconds']:.1f}s"
        )
    else:
        done = f"loss {row['loss']:.4f} in {row['seconds']:.1f}s"
    return f"{word} {task} L={row['eval_length']} ({row.get('overrides') or 'as saved'}): {done}"


def _warn(text: str) -> None:
    log.warning(f"posx: warning: {text}")


def _run_json(
    run: Path, label: str, loaded: Loaded, corpus: dict[str, Any], values: dict[str, Any]
) -> dict[str, Any]:
    info = {
        "schema_version": SCHEMA_VERSION,
        "run": run.name,
        "status": "pretrained",
        "encoding": label,
        "task": "text",
        "model": "pretrained",
        "seed": 0,
        # what an extension's `parent` names, so base and extension pair (posx.claims.lineage)
        "fingerprint": model_fingerprint(
            loaded.source.revision, loaded.info["tokenizer"]["sha256"]
        ),
        "train_length": loaded.trained,
        "pretrained": loaded.info,
        "corpus": corpus,
    }
    if values["experiment"]:
        info["experiment"] = str(values["experiment"])
    return info


def _ident(info: dict[str, Any], loaded: Loaded, values: dict[str, Any]) -> dict[str, Any]:
    """The columns every row of the run shares; the seed and fingerprint are ``run.json``'s
    (an extension records its own: its seed, and its settings with its base's identity)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "run": info["run"],
        "encoding": info["encoding"],
        "model": info["model"],
        "seed": int(info.get("seed") or 0),
        "train_length": info["train_length"],
        "eval_seed": values["eval.seed"],
        "fingerprint": str(info["fingerprint"]),
        # lengths count this tokenizer's tokens: a report never puts them beside another's
        "length_unit": tokenizer_unit(loaded.info["tokenizer"]["sha256"]),
        "device": loaded.device.type,
        "precision": loaded.info["dtype"],
        "model_id": loaded.source.name,
        "revision": loaded.source.revision,
    }
