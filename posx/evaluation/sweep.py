"""The length sweep: evaluate a trained run at many lengths, one ``eval.csv`` row per length and
one ``eval_positions.csv`` row per (length, position bucket).

Each row records its protocol (``mode``, ``window``, ``stride``; see
:mod:`posx.evaluation.protocol`) and its eval-time ``overrides``, so no number is ambiguous.
Every run of a task reads the same held-out sequences at a given length and seed (cached under
the results root, :mod:`posx.evaluation.data`). Memory per length: :mod:`posx.evaluation.memory`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from posx.config.build import build_model, build_positions, build_task
from posx.config.saved import recorded_overrides
from posx.config.variant_names import scaling_cell
from posx.errors import PosxError
from posx.evaluation.buckets import bucket_rows
from posx.evaluation.data import CACHE_DIR, eval_set
from posx.evaluation.memory import PeakMemory, heap_frozen
from posx.evaluation.protocol import Protocol, Tally, resolve_protocol, score
from posx.model.transformer import TransformerLM
from posx.positions import PositionStrategy
from posx.runtime.distributed import pick_device
from posx.runtime.precision import autocast_context, precision_name
from posx.saved import SavedRun
from posx.storage.results import SCHEMA_VERSION, merge_rows
from posx.tasks.base import Batch, Task
from posx.tasks.text import UnsupportedLength, sequences_for

ROW_KEYS = ["eval_length", "mode", "window", "stride", "overrides"]


def metrics(
    tally: Tally, task: Task, seconds: float, text_bytes: int | None = None
) -> dict[str, Any]:
    """The row's metrics from the sums of one length (means over scored tokens); bits per byte
    divide the total nats by the ``text_bytes`` the scored tokens stand for (text only)."""
    scored = int(tally.count.sum())
    loss = float(tally.loss.sum()) / max(scored, 1)
    answered = int((tally.seq_count > 0).sum())
    return {
        "loss": loss,
        "ppl": math.exp(min(loss, 80.0)),
        "bpb": float(tally.loss.sum()) / math.log(2) / text_bytes if text_bytes else math.nan,
        "bytes": text_bytes if text_bytes else math.nan,
        "acc": int(tally.hits.sum()) / max(scored, 1),
        "exact_match": int(tally.exact.sum()) / max(answered, 1) if task.exact_match else math.nan,
        "tokens": scored,
        "max_context": tally.max_context,
        "sequences": len(tally.seq_count),
        "seconds": seconds,
        "tokens_per_s": tally.forward_tokens / max(seconds, 1e-9),
        "forward_tokens": tally.forward_tokens,
    }


@torch.inference_mode()
def evaluate_length(
    model: TransformerLM,
    task: Task,
    data: Batch,
    protocol: Protocol,
    ecfg: DictConfig,
    device: torch.device,
    on_batch: Any = None,
    positions: Any = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Metrics of ``model`` on the eval set ``data`` (``[n, L]``) read under ``protocol``.

    Returns:
        The row's metrics (with peak memory and the task's per-sequence metrics) and the
        per-position bucket rows.
    """
    start = time.perf_counter()
    with PeakMemory(device) as mem, autocast_context(device, ecfg.precision):
        tally = score(model, data, protocol, ecfg.batch_tokens, device, on_batch, positions)
    row = metrics(tally, task, time.perf_counter() - start, task.text_bytes(data))
    row.update(peak_mem_mb=mem.peak_mb, mem_delta_mb=mem.delta_mb)
    row.update(precision=precision_name(ecfg.precision, device))
    # The report measures exact match above this; it never rebuilds the task to learn it.
    row.update(chance=task.chance(data) if task.exact_match else math.nan)
    row.update(task.sequence_metrics(data, tally.exact))  # e.g. passkey's accuracy by depth
    return row, bucket_rows(tally, ecfg.buckets)


class StructuredForward:
    """``model`` as the evaluator calls it, with positions from the task's token structure.

    For strategies that declare ``needs_structure`` (coupling, Abacus): each forward pass's
    positions are the strategy's evaluation positions (no random offset) for the tokens it
    reads, whatever positions the caller passes.

    Args:
        model: The trained LM.
        task: The run's task (reports the structure of any token rows).
        strategy: The run's position strategy.
    """

    def __init__(self, model: TransformerLM, task: Task, strategy: PositionStrategy) -> None:
        self.model, self.task, self.strategy = model, task, strategy
        self.generator = torch.Generator()  # unused: evaluation draws no offsets

    def __call__(self, tokens: torch.Tensor, pos: torch.Tensor | None = None) -> torch.Tensor:
        """``tokens [b, s]`` -> logits ``[b, s, vocab]``."""
        structure = self.task.structure(tokens.cpu())
        positions = self.strategy.structured(structure, self.generator, training=False)
        return self.model(tokens, positions.to(tokens.device))


def evaluate_model(
    model: TransformerLM,
    task: Task,
    lengths: list[int],
    cfg: DictConfig,
    device: torch.device,
    cache_dir: Path | None = None,
    progress: Progress | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Eval rows (one per length) and bucket rows; a length that cannot run is a row with its
    status and reason, never an exception."""
    with heap_frozen():  # each length collects garbage first: only what the sweep made
        return _evaluate_lengths(model, task, lengths, cfg, device, cache_dir, progress)


def _evaluate_lengths(
    model: TransformerLM,
    task: Task,
    lengths: list[int],
    cfg: DictConfig,
    device: torch.device,
    cache_dir: Path | None,
    progress: Progress | None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    ecfg = cfg.eval
    strategy = build_positions(cfg)  # the run's position strategy (randomized may sample here)
    model.eval()
    task_cfg = OmegaConf.to_container(cfg.task, resolve=True)
    bar = progress.add_task("eval", total=len(lengths), what="") if progress else None
    rows, buckets = [], []
    train_width = task.tokens_for(cfg.train.length)
    for done, length in enumerate(lengths):
        width = task.tokens_for(length)  # = length for a task measured in tokens
        proto = resolve_protocol(ecfg.mode, width, ecfg.window, ecfg.stride, train_width)
        row: dict[str, Any] = {
            "eval_length": length,
            "length_unit": task.length_unit,
            "mode": proto.mode,
            "window": proto.window,
            "stride": proto.stride,
            "status": "ok",
            "reason": "",
        }
        # The model reads `window` tokens at once (= length in full mode), so a learned
        # absolute encoding can still be evaluated at any length in sliding mode.
        # Checked against the positions the strategy gives (coupled IDs count digits, not
        # tokens), so a learned table read through IDs is evaluated wherever its rows reach.
        reason = strategy.eval_reason(model.encoding, proto.window, task.longest_number(length))
        if reason:
            row.update(status="unsupported", reason=reason)
        else:
            try:
                n = sequences_for(ecfg.tokens, width)
                data = eval_set(task, length, n, ecfg.seed, cache_dir, task_cfg)

                def on_batch(i: int, total: int, done: int = done, length: int = length) -> None:
                    if progress is not None and bar is not None:
                        progress.update(bar, completed=done + i / total, what=f"L={length}")

                reader = (
                    StructuredForward(model, task, strategy) if strategy.needs_structure else model
                )
                metrics_, position_rows = evaluate_length(
                    reader, task, data, proto, ecfg, device, on_batch, strategy.evaluator(ecfg.seed)
                )
                row.update(metrics_)
                buckets += [{**row_key(row), **b} for b in position_rows]
            except UnsupportedLength as err:  # the held-out text cannot fill one sequence
                row.update(status="unsupported", reason=str(err).strip().splitlines()[0][:300])
            except (RuntimeError, ValueError, PosxError) as err:  # e.g. out of memory
                row.update(status="failed", reason=str(err).strip().splitlines()[0][:300])
        rows.append(row)
    return rows, buckets


def row_key(row: dict[str, Any]) -> dict[str, Any]:
    """The columns of eval row ``row`` that each of its per-position bucket rows repeats: the
    length, the protocol (mode, window, stride), status and reason."""
    return {k: row[k] for k in ("eval_length", "mode", "window", "stride", "status", "reason")}


def evaluate_run(
    run: SavedRun,
    lengths: list[int],
    overrides: list[str] | None = None,
    model: TransformerLM | None = None,
    task: Task | None = None,
    cfg: DictConfig | None = None,
    device: str = "auto",
    progress: bool = False,
    cache_dir: Path | None = None,
    trust: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Evaluates one run at ``lengths``; merges rows into ``eval.csv`` and ``eval_positions.csv``.

    Model, task and config are rebuilt from the saved run unless the caller (training) passes
    them in. Rows with the same (length, mode, window, stride, overrides) are replaced.

    Args:
        run: The saved run (its ``run.json`` names the rows; its saved config gives their
            fingerprint).
        lengths: Eval lengths.
        overrides: Eval-time ``key=value`` overrides (``eval.mode=sliding`` etc. included).
        model: Trained model (with ``task`` and ``cfg``), instead of loading the checkpoint.
        task: The run's task.
        cfg: The run's config.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        progress: Show a progress bar for this run.
        cache_dir: Held-out data cache (default ``<results root>/.eval_cache``).
        trust: Module prefixes whose ``_target_`` classes may be built besides posx's own
            (see :mod:`posx.config.trust`); used when the run is loaded from its directory.

    Returns:
        The eval rows written.
    """
    overrides = sorted(overrides or [])
    info = run.info
    if model is None or task is None or cfg is None:
        cfg = run.loadable_config(overrides, trust)
        task = build_task(cfg, run.results_root)
        model = build_model(cfg, task.vocab_size)
        run.load_into(model)
        model.to(pick_device(device))
    dev = next(model.parameters()).device
    cache = cache_dir or run.results_root / CACHE_DIR
    bar = Progress(
        TextColumn(f"[bold]{run.name}[/] eval"),
        BarColumn(),
        TextColumn("{task.fields[what]}"),
        TimeElapsedColumn(),
        disable=not progress,
        transient=True,
    )
    with bar:
        rows, buckets = evaluate_model(model, task, lengths, cfg, dev, cache, bar)
    ident = {
        "schema_version": SCHEMA_VERSION,
        "run": info["run"],
        "encoding": info["encoding"],
        "task": info["task"],
        "model": info["model"],
        "seed": info["seed"],
        "train_length": info["train_length"],
        "overrides": recorded_overrides(overrides),
        "scaling": scaling_cell(cfg),  # what ran, from the run's config or an override
        "eval_seed": cfg.eval.seed,
        # from the saved config: `cfg` here carries the eval-time overrides
        "fingerprint": run.fingerprint or info.get("fingerprint", ""),
        "device": dev.type,
        # an interrupted run evaluated from its last checkpoint says so in every row
        "steps_done": run.steps_done,
        "steps_planned": info.get("steps"),
    }
    rows = [{**ident, **r} for r in rows]
    merge_rows(run.path / "eval.csv", rows, ROW_KEYS)
    merge_rows(
        run.path / "eval_positions.csv", [{**ident, **b} for b in buckets], ROW_KEYS, replaces=rows
    )
    return rows
