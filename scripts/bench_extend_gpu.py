"""`posx extend hf:` on a model of a real shape: tokens/s and peak memory against the preflight.

For each model shape (Qwen2-0.5B's and Llama-3.2-1B's configs, written below: no download) the
script saves a randomly initialised model with ``save_pretrained`` (bf16, as the published ones;
the real vocabulary size, a small byte-level tokenizer trained locally beside it: the vocabulary
only sizes the embeddings) and, for each length, runs the real command in a fresh process::

    posx extend hf:DIR extension=yarn extend.factor=LENGTH/TRAINED train.checkpointing=true
        extend.steps=4 train.batch_size=1 eval.lengths=[] ...

(bf16 mixed precision on CUDA, ``train.precision=auto``). The models' trained context is set to
4,096 tokens (``max_position_embeddings``; the published models say 32k and 128k), so 8k and 16k
are YaRN x2 and x4 extensions; the context changes no parameter and no estimate.

Each row gives the training tokens/s (the mean of the steps after the first, which pays for
kernel selection and the allocator's growth), the preflight's estimate per process (what
``--dry-run`` prints and ``run.json`` records), and on CUDA the process's peak
``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` over the whole command (load,
train, save), with reserved / estimate and the verdict: within 20 % or not. On a CPU there are no
allocator statistics: the row says so and memory is not compared.

Time is bounded (``--budget``, 420 s by default; the device session allows 10 min a command): a
length whose predicted time (the previous length's, scaled) no longer fits, or a model that
cannot be built in what is left, gets a row saying so instead of running; a run that overruns is
stopped at the budget and its row says that.

    python scripts/bench_extend_gpu.py --out results/bench_extend      # CUDA: both shapes, 8k 16k
    python scripts/bench_extend_gpu.py --tiny                          # tiny shapes (CPU default)
    python scripts/bench_extend_gpu.py --models qwen2-0.5b --lengths 8192 --steps 3 --budget 200

On a lent GPU machine, whose image lacks hydra-core, omegaconf and antlr4 (pure Python; ``make
gpu-deps`` copies them from the venv into ``.gpu-deps/``, carried with the working tree)::

    PYTHONPATH=.gpu-deps python3 scripts/bench_extend_gpu.py --out $OUT

Writes ``bench_extend.csv`` and ``bench_extend.md`` (the device named) under ``--out``; exits 1 if
a run failed or a measured peak is not within 20 % of its estimate.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 0.20  # |peak / estimate - 1| the preflight is held to
GIB = 2**30

# The published configs' shapes (config.json of Qwen/Qwen2-0.5B and meta-llama/Llama-3.2-1B).
SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen2-0.5b": ("qwen2", {"vocab_size": 151936, "hidden_size": 896,
                             "intermediate_size": 4864, "num_hidden_layers": 24,
                             "num_attention_heads": 14, "num_key_value_heads": 2,
                             "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0,
                             "tie_word_embeddings": True, "use_sliding_window": False}),
    "llama-3.2-1b": ("llama", {"vocab_size": 128256, "hidden_size": 2048,
                               "intermediate_size": 8192, "num_hidden_layers": 16,
                               "num_attention_heads": 32, "num_key_value_heads": 8,
                               "head_dim": 64, "rms_norm_eps": 1e-5, "rope_theta": 500_000.0,
                               "tie_word_embeddings": True}),
    # CPU-sized: the same code path in seconds (vocab 0: the tokenizer's)
    "tiny-qwen2": ("qwen2", {"vocab_size": 0, "hidden_size": 64, "intermediate_size": 128,
                             "num_hidden_layers": 2, "num_attention_heads": 4,
                             "num_key_value_heads": 2, "tie_word_embeddings": True}),
}  # fmt: skip
REAL = {"models": "qwen2-0.5b,llama-3.2-1b", "lengths": "8192,16384", "trained": 4096}
TINY = {"models": "tiny-qwen2", "lengths": "64,128", "trained": 32}
FIELDS = ["model", "status", "params", "length", "trained", "device", "precision",
          "checkpointing", "steps", "tokens_per_s", "s_per_step", "wall_s", "estimate_gib",
          "peak_allocated_gib", "peak_reserved_gib", "reserved_over_estimate", "verdict",
          "estimate_parts", "note"]  # fmt: skip


def model_config(name: str, trained: int, tokenizer: Any) -> Any:
    """The ``transformers`` config of shape ``name`` with a trained context of ``trained``."""
    import transformers

    family, shape = SHAPES[name]
    values = {**shape, "vocab_size": shape["vocab_size"] or len(tokenizer)}
    cls = {"qwen2": transformers.Qwen2Config, "llama": transformers.LlamaConfig}[family]
    return cls(**values, max_position_embeddings=trained, bos_token_id=tokenizer.bos_token_id,
               eos_token_id=tokenizer.eos_token_id)  # fmt: skip


def save_model(config: Any, tokenizer: Any, out: Path) -> None:
    """Saves a randomly initialised model of ``config`` (bf16) and ``tokenizer`` into ``out``."""
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def parameters(config: Any) -> int:
    """Parameters of a model of ``config`` (built on the meta device: nothing allocated)."""
    import torch
    import transformers

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


class Pace:
    """Predicts a job's seconds from the last one of its kind, in proportion to its work."""

    def __init__(self) -> None:
        self.last: dict[str, tuple[float, float]] = {}

    def predict(self, kind: str, work: float) -> float | None:
        seen = self.last.get(kind)
        return None if seen is None else seen[1] * work / seen[0]

    def record(self, kind: str, work: float, seconds: float) -> None:
        self.last[kind] = (work, seconds)


def extend_words(model: Path, length: int, trained: int, args: argparse.Namespace) -> list[str]:
    """The ``posx extend`` command line of one measurement."""
    return ["extend", f"hf:{model}", "extension=yarn", f"extend.factor={length / trained:g}",
            f"extend.steps={args.steps}", "extend.warmup_steps=1", "train.batch_size=1",
            "train.micro_batch=1", "train.checkpointing=true",
            f"train.checkpoint_every={args.steps}", f"train.device={args.device}",
            "eval.lengths=[]", f"task.max_bytes={args.corpus_bytes}",
            f"root={args.workdir / 'runs'}"]  # fmt: skip


def posx(words: list[str]) -> tuple[int, str, str]:
    """``posx WORDS`` in this process: exit code, stdout, stderr."""
    from posx.cli import main

    argv, out, err = sys.argv, io.StringIO(), io.StringIO()
    sys.argv, code = ["posx", *words], 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    finally:
        sys.argv = argv
    return code, out.getvalue(), err.getvalue()


def child(words: list[str]) -> dict[str, Any]:
    """One measurement: the plan (``--dry-run``), then the extension, with CUDA's peaks."""
    import pandas as pd
    import torch

    code, out, err = posx([*words, "--dry-run"])
    if code:
        return {"error": (err.strip().splitlines() or [f"exit {code}"])[-1]}
    memory = next((line for line in out.splitlines() if line.startswith("memory")), "")
    cuda = torch.cuda.is_available() and "train.device=cpu" not in words
    if cuda:  # the plan asked the device for its free memory; nothing is allocated yet
        torch.cuda.init()
        torch.cuda.reset_peak_memory_stats()
    began = time.perf_counter()
    code, out, err = posx(words)
    wall = time.perf_counter() - began
    if code:
        return {"error": (err.strip().splitlines() or [f"exit {code}"])[-1]}
    run = Path(out.strip().splitlines()[-1])
    info = json.loads((run / "run.json").read_text())
    rows = pd.read_csv(run / "metrics.csv")
    timed = rows.iloc[1:] if len(rows) > 1 else rows  # the first step warms up
    return {
        "params": info["pretrained"]["parameters"],
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "precision": info["extension"]["precision"],
        "checkpointing": info["extension"]["checkpointing"],
        "tokens_per_s": float(timed["tokens_per_s"].mean()),
        "s_per_step": float(timed["seconds"].mean()),
        "wall_s": wall,
        "estimate": info["extension"]["memory_estimate_bytes"],
        "estimate_parts": memory.partition("per process:")[2].strip(),
        "peak_allocated": torch.cuda.max_memory_allocated() if cuda else None,
        "peak_reserved": torch.cuda.max_memory_reserved() if cuda else None,
    }


def verdict(estimate: float, peak: float | None, device: str) -> tuple[float | None, str]:
    """``peak / estimate`` and what it says (the tolerance is :data:`TOLERANCE`)."""
    if peak is None:
        return None, f"not compared: no CUDA allocator statistics on {device}"
    ratio = peak / estimate
    off = abs(ratio - 1)
    side = "over" if ratio > 1 else "under"
    if off <= TOLERANCE:
        return ratio, f"within {TOLERANCE:.0%} ({side} by {off:.0%})"
    return ratio, f"NOT within {TOLERANCE:.0%}: peak {side} the estimate by {off:.0%}"


def skip_reason(left: float, predicted: float | None, what: str) -> str | None:
    """Why ``what`` is not started with ``left`` seconds of budget (None: start it)."""
    if left <= 0:
        return f"skipped: the time budget was spent before {what}"
    if predicted is not None and predicted > left:
        return f"skipped: {what} would take about {predicted:.0f} s, {left:.0f} s of budget left"
    return None


def measure(
    model: Path, length: int, trained: int, timeout: float, args: argparse.Namespace
) -> dict[str, Any]:
    """Runs one measurement in a fresh process, so one length's peak never leaks into another;
    ``process_s`` is that process's whole time (imports, the plan, the command)."""
    cmd = [sys.executable, __file__, "--child", *extend_words(model, length, trained, args)]
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}
    began = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"stopped": f"stopped at the time budget, after {timeout:.0f} s"}
    finally:
        shutil.rmtree(args.workdir / "runs", ignore_errors=True)
    seconds = time.perf_counter() - began
    lines = proc.stdout.strip().splitlines()
    if proc.returncode or not lines:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return {"error": last[:300], "process_s": seconds}
    return {**json.loads(lines[-1]), "process_s": seconds}


def row_of(
    name: str, params: int, length: int, result: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    """The CSV row of one measurement, or of one skipped, stopped or failed."""
    row: dict[str, Any] = {"model": name, "params": params, "length": length,
                           "trained": args.trained, "steps": args.steps}  # fmt: skip
    for status in ("skipped", "stopped"):
        if status in result:
            return {**row, "status": status, "note": result[status]}
    if "error" in result:
        return {**row, "status": "failed", "note": result["error"]}
    ratio, text = verdict(result["estimate"], result["peak_reserved"], result["device"])
    gib = lambda b: None if b is None else round(b / GIB, 2)  # noqa: E731
    kept = ("device", "precision", "checkpointing", "estimate_parts")
    return {**row, "status": "measured", **{k: result[k] for k in kept},
            "tokens_per_s": round(result["tokens_per_s"]),
            "s_per_step": round(result["s_per_step"], 3), "wall_s": round(result["wall_s"], 1),
            "estimate_gib": gib(result["estimate"]),
            "peak_allocated_gib": gib(result["peak_allocated"]),
            "peak_reserved_gib": gib(result["peak_reserved"]),
            "reserved_over_estimate": None if ratio is None else round(ratio, 3),
            "verdict": text}  # fmt: skip


COLUMNS = {"model": "model", "params": "parameters", "length": "length",
           "tokens_per_s": "tokens/s", "s_per_step": "s/step", "estimate_gib": "estimate GiB",
           "peak_allocated_gib": "peak allocated GiB", "peak_reserved_gib": "peak reserved GiB",
           "reserved_over_estimate": "reserved / estimate", "verdict": "verdict"}  # fmt: skip


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    """The table for docs/performance.md: one row per (model, length), a skipped, stopped or
    failed one saying why in its verdict."""
    lines = [header, "", "| " + " | ".join(COLUMNS.values()) + " |"]
    lines.append("|---|" + "---:|" * (len(COLUMNS) - 2) + "---|")
    for r in rows:
        cells = ["-" if r.get(k) in (None, "") else str(r[k]) for k in COLUMNS]
        if r["status"] != "measured":
            cells[-1] = r["note"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every (model, length), in order, within the time budget."""
    from tests.unit.pretrained.tiny_models import byte_level_tokenizer

    began, rows, pace = time.perf_counter(), [], Pace()
    left = lambda: args.budget - (time.perf_counter() - began)  # noqa: E731
    tokenizer = byte_level_tokenizer()
    for name in args.models:
        directory, config = args.workdir / name, model_config(name, args.trained, tokenizer)
        params = parameters(config)
        why = skip_reason(left(), pace.predict("build", params), f"building {name}")
        if why is None:
            start = time.perf_counter()
            save_model(config, tokenizer, directory)
            pace.record("build", params, time.perf_counter() - start)
            print(f"{name}: {params / 1e9:.3f}B parameters, saved in "
                  f"{time.perf_counter() - start:.1f} s", flush=True)  # fmt: skip
        for length in args.lengths:
            work = params * length
            why = why or skip_reason(left(), pace.predict("run", work), f"{name} at {length}")
            if why:
                result = {"skipped": why}
            else:
                result = measure(directory, length, args.trained, max(left(), 1.0), args)
                if "process_s" in result:
                    pace.record("run", work, result["process_s"])
            rows.append(row_of(name, params, length, result, args))
            print(json.dumps(rows[-1]), flush=True)
            write(rows, args)  # after every row: a run stopped from outside keeps what finished
        shutil.rmtree(directory, ignore_errors=True)
    return rows


def write(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    import torch
    import transformers

    from posx.storage.atomic import atomic_write

    args.out.mkdir(parents=True, exist_ok=True)
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, FIELDS)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write(args.out / "bench_extend.csv", text.getvalue())
    device = next((r["device"] for r in rows if r.get("device")), args.device)
    if device == "cpu":
        device = f"CPU ({platform.machine()}, {os.cpu_count()} cores)"
    header = (f"Device: {device}; torch {torch.__version__}, transformers "
              f"{transformers.__version__}; {time.strftime('%Y-%m-%d %H:%M')}; "
              f"{args.steps} steps of one window, YaRN from {args.trained}, "
              "train.checkpointing=true")  # fmt: skip
    atomic_write(args.out / "bench_extend.md", markdown(rows, header))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="tiny shapes (default on a CPU)")
    parser.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    parser.add_argument("--models", help=f"comma-separated of {', '.join(SHAPES)}")
    parser.add_argument("--lengths", help="comma-separated window lengths")
    parser.add_argument("--trained", type=int, help="the models' trained context")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--corpus-bytes", type=int, default=2_000_000)
    parser.add_argument("--budget", type=float, default=420.0, help="seconds for everything")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench_extend")
    parser.add_argument("--workdir", type=Path, help="where models are written (default: temp)")
    args = parser.parse_args(argv)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    elif args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    defaults = TINY if args.tiny or args.device == "cpu" else REAL
    args.models = (args.models or defaults["models"]).split(",")
    unknown = [m for m in args.models if m not in SHAPES]
    if unknown:
        parser.error(f"unknown model {unknown[0]}; choose from {', '.join(SHAPES)}")
    try:
        args.lengths = [int(x) for x in (args.lengths or defaults["lengths"]).split(",")]
    except ValueError:
        parser.error("--lengths takes integers like 8192,16384")
    args.trained = args.trained or defaults["trained"]
    if args.steps < 1 or min(args.lengths) <= args.trained:
        parser.error(f"--steps must be >= 1 and every length longer than --trained {args.trained}")
    return args


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(child(sys.argv[2:])))
        return 0
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_extend_") as scratch:
        args.workdir = args.workdir or Path(scratch)
        rows = run_all(args)
    write(rows, args)
    print((args.out / "bench_extend.md").read_text())
    bad = [r for r in rows if r["status"] == "failed" or str(r.get("verdict")).startswith("NOT")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # measure this checkout's posx, not an installed one
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    sys.exit(main())
