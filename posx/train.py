"""The training loop: one function, read top to bottom."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from posx import __version__
from posx.build import build_model, build_task
from posx.errors import PosxError
from posx.results import SCHEMA_VERSION, save_checkpoint, write_csv, write_json
from posx.tasks.base import Batch


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise PosxError(f"train.device={name} but CUDA is not available; use train.device=cpu")
    return torch.device(name)


def lr_at(step: int, cfg: DictConfig) -> float:
    """Linear warmup to ``lr``, then cosine decay to ``lr * min_lr_ratio`` at the last step."""
    t = cfg.train
    if step < t.warmup_steps:
        return t.lr * (step + 1) / t.warmup_steps
    progress = (step - t.warmup_steps) / max(1, t.steps - t.warmup_steps)
    floor = t.lr * t.min_lr_ratio
    return floor + 0.5 * (t.lr - floor) * (1 + math.cos(math.pi * min(1.0, progress)))


def masked_loss(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Mean cross-entropy over the scored targets. ``logits [b, s, V]``."""
    targets = batch.targets.masked_fill(~batch.mask, -100)
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100)


def make_optimizer(
    model: torch.nn.Module, cfg: DictConfig, device: torch.device
) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not norms, biases or scalar tables)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.train.weight_decay},
        {"params": rest, "weight_decay": 0.0},
    ]
    betas = (cfg.train.beta1, cfg.train.beta2)
    return torch.optim.AdamW(groups, lr=cfg.train.lr, betas=betas, fused=device.type == "cuda")


def run_meta(
    cfg: DictConfig, run_dir: Path, names: dict[str, str], task_info: dict
) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "posx_version": __version__,
        "run": run_dir.name,
        "encoding": names["encoding"],
        "task": names["task"],
        "model": names["model"],
        "seed": cfg.seed,
        "train_length": cfg.train.length,
        "steps": cfg.train.steps,
        "task_info": task_info,
    }


def train(cfg: DictConfig, run_dir: Path, names: dict[str, str]) -> dict[str, Any]:
    """Trains one model as configured and writes everything into ``run_dir``.

    Args:
        cfg: Composed, validated config.
        run_dir: The run's directory (Hydra's output dir).
        names: Labels of the chosen ``encoding``, ``task`` and ``model`` options.

    Returns:
        Summary: final loss, tokens/s, parameter count, seconds.
    """
    t = cfg.train
    if t.threads:
        torch.set_num_threads(t.threads)
    device = pick_device(t.device)
    torch.manual_seed(cfg.seed)
    data_rng = torch.Generator().manual_seed(cfg.seed)  # the data order depends on the seed alone

    task = build_task(cfg)
    model = build_model(cfg, task.vocab_size).to(device)
    optimizer = make_optimizer(model, cfg, device)
    meta = run_meta(cfg, run_dir, names, task.describe())
    meta["parameters"] = model.num_parameters()
    write_json(run_dir / "run.json", meta)

    rows: list[dict[str, Any]] = []
    tokens_seen, start, window_start, window_tokens = 0, time.perf_counter(), time.perf_counter(), 0
    progress = Progress(
        TextColumn(f"[bold]{run_dir.name}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TextColumn("loss {task.fields[loss]:.4f}"),
        TextColumn("{task.fields[tps]:,.0f} tok/s"),
        TimeRemainingColumn(),
        disable=not t.progress,
        transient=False,
    )
    with progress:
        bar = progress.add_task("train", total=t.steps, loss=float("nan"), tps=0.0)
        model.train()
        for step in range(t.steps):
            lr = lr_at(step, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch = task.train_batch(t.batch_size, t.length, data_rng).to(device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                logits = model(batch.inputs)
            loss = masked_loss(logits, batch)
            if not torch.isfinite(loss):
                raise PosxError(
                    f"loss became {loss.item()} at step {step}; the last checkpoint is kept"
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if t.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
            optimizer.step()

            tokens_seen += batch.inputs.numel()
            window_tokens += batch.inputs.numel()
            done = step + 1
            if done % t.log_every == 0 or done == t.steps:
                now = time.perf_counter()
                tps = window_tokens / max(now - window_start, 1e-9)
                window_start, window_tokens = now, 0
                rows.append(
                    {
                        "step": done,
                        "loss": loss.item(),
                        "lr": lr,
                        "tokens": tokens_seen,
                        "tokens_per_s": tps,
                        "seconds": now - start,
                    }
                )
                write_csv(run_dir / "metrics.csv", pd.DataFrame(rows))
                progress.update(bar, completed=done, loss=rows[-1]["loss"], tps=tps)
            if t.checkpoint_every and done % t.checkpoint_every == 0 and done < t.steps:
                save_checkpoint(run_dir, model, optimizer, {"step": done, "tokens": tokens_seen})

    seconds = time.perf_counter() - start
    save_checkpoint(run_dir, model, optimizer, {"step": t.steps, "tokens": tokens_seen})
    # Throughput over the whole run, first steps (allocator warm-up) included.
    summary = {
        "final_loss": rows[-1]["loss"],
        "tokens_per_s": tokens_seen / seconds,
        "seconds": seconds,
        "parameters": meta["parameters"],
    }
    write_json(run_dir / "run.json", {**meta, "status": "trained", **summary})

    if t.eval_at_end:
        from posx.evaluate import evaluate_run

        evaluate_run(run_dir, list(cfg.eval.lengths), model=model, task=task, cfg=cfg)
    return summary
