"""The length sweep: evaluate a trained run at many sequence lengths, one CSV row per length.

Protocol ``full``: the held-out data is cut into non-overlapping sequences of the eval length and
every scored token is predicted with all the tokens before it in its sequence (the extrapolation
regime). Every run of the same task gets the same sequences at a given length and seed.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posx.build import build_model, build_task
from posx.config import validate
from posx.errors import ConfigError, PosxError
from posx.model.transformer import TransformerLM
from posx.results import SCHEMA_VERSION, load_checkpoint, merge_rows, run_config, run_info
from posx.tasks.base import Task
from posx.tasks.text import sequences_for
from posx.train import pick_device

ROW_KEYS = ["eval_length", "mode", "window", "stride", "overrides"]


class PeakMemory:
    """Peak memory in MiB inside a ``with`` block: CUDA allocator peak, or sampled process RSS."""

    def __init__(self, device: torch.device, interval: float = 0.002) -> None:
        self.device, self.interval, self.peak_mb = device, interval, float("nan")
        self._stop = threading.Event()

    @staticmethod
    def rss_mb() -> float:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096 / 2**20
        except OSError:  # not Linux: fall back to the lifetime peak
            import resource

            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak_mb = max(self.peak_mb, self.rss_mb())

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self.peak_mb = self.rss_mb()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            self.peak_mb = torch.cuda.max_memory_allocated(self.device) / 2**20
        else:
            self._stop.set()
            self._thread.join()
            self.peak_mb = max(self.peak_mb, self.rss_mb())


@torch.inference_mode()
def evaluate_length(
    model: TransformerLM, task: Task, length: int, ecfg: DictConfig, device: torch.device
) -> dict[str, Any]:
    """Metrics of ``model`` on the task's fixed held-out sequences of ``length`` tokens."""
    data = task.eval_set(length, sequences_for(ecfg.tokens, length), ecfg.seed)
    per_batch = max(1, ecfg.batch_tokens // length)
    loss_sum, correct, scored, exact, sequences = 0.0, 0, 0, 0, 0
    start = time.perf_counter()
    with PeakMemory(device) as mem:
        for i in range(0, len(data), per_batch):
            batch = data[i : i + per_batch].to(device)
            logits = model(batch.inputs).float()
            losses = F.cross_entropy(logits.transpose(1, 2), batch.targets, reduction="none")
            hit = (logits.argmax(-1) == batch.targets) & batch.mask
            loss_sum += losses[batch.mask].sum().item()
            correct += hit.sum().item()
            scored += batch.mask.sum().item()
            has_answer = batch.mask.any(1)
            exact += ((hit == batch.mask).all(1) & has_answer).sum().item()
            sequences += has_answer.sum().item()
    seconds = time.perf_counter() - start
    loss = loss_sum / max(scored, 1)
    return {
        "loss": loss,
        "ppl": math.exp(min(loss, 80.0)),
        "bpb": loss / math.log(2) / task.bytes_per_token if task.bytes_per_token else math.nan,
        "acc": correct / max(scored, 1),
        "exact_match": exact / max(sequences, 1) if task.exact_match else math.nan,
        "tokens": scored,
        "sequences": len(data),
        "seconds": seconds,
        "tokens_per_s": data.inputs.numel() / seconds,
        "peak_mem_mb": mem.peak_mb,
    }


def evaluate_model(
    model: TransformerLM, task: Task, lengths: list[int], ecfg: DictConfig, device: torch.device
) -> list[dict[str, Any]]:
    """One row per length; a length that cannot run is a row with its status and reason."""
    model.eval()
    rows = []
    for length in lengths:
        row: dict[str, Any] = {"eval_length": length, "status": "ok", "reason": ""}
        reason = model.encoding.unsupported_reason(length)
        if reason:
            row.update(status="unsupported", reason=reason)
        else:
            try:
                row.update(evaluate_length(model, task, length, ecfg, device))
            except (
                RuntimeError,
                ValueError,
                PosxError,
            ) as err:  # e.g. out of memory at this length
                row.update(status="failed", reason=str(err).strip().splitlines()[0][:300])
        rows.append(row)
    return rows


def apply_overrides(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """Eval-time ``key=value`` overrides on a run's config (e.g. ``encoding.base=50000``)."""
    cfg = cfg.copy()
    OmegaConf.set_struct(cfg, True)  # a misspelled key is an error, not a silent new key
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except OverrideParseException as err:
        raise ConfigError(f"bad eval override: {str(err).splitlines()[0]}") from err
    for o in parsed:
        try:
            OmegaConf.update(cfg, o.key_or_group, o.value(), force_add=o.is_add())
        except OmegaConfBaseException as err:
            raise ConfigError(
                f"bad eval override {o.input_line!r}: {str(err).splitlines()[0]}"
            ) from err
    return cfg


def evaluate_run(
    run_dir: Path,
    lengths: list[int],
    overrides: list[str] | None = None,
    model: TransformerLM | None = None,
    task: Task | None = None,
    cfg: DictConfig | None = None,
    device: str = "auto",
) -> list[dict[str, Any]]:
    """Evaluates one run at ``lengths`` and merges the rows into ``run_dir/eval.csv``.

    Model, task and config are rebuilt from the run directory unless the caller (training)
    passes them in. Rows with the same (length, mode, window, stride, overrides) are replaced.
    """
    overrides = sorted(overrides or [])
    info = run_info(run_dir)
    if model is None or task is None or cfg is None:
        cfg = apply_overrides(run_config(run_dir), overrides)
        validate(cfg)
        task = build_task(cfg)
        model = build_model(cfg, task.vocab_size)
        load_checkpoint(run_dir, model)
        dev = pick_device(device)
        model.to(dev)
    dev = next(model.parameters()).device
    rows = evaluate_model(model, task, lengths, cfg.eval, dev)
    ident = {
        "schema_version": SCHEMA_VERSION,
        "run": info["run"],
        "encoding": info["encoding"],
        "task": info["task"],
        "model": info["model"],
        "seed": info["seed"],
        "train_length": info["train_length"],
        "mode": "full",
        "overrides": " ".join(overrides),
        "eval_seed": cfg.eval.seed,
        "device": dev.type,
    }
    rows = [{**ident, "window": r["eval_length"], "stride": r["eval_length"], **r} for r in rows]
    merge_rows(run_dir / "eval.csv", rows, ROW_KEYS)
    return rows
