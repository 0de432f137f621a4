"""Evaluator cost per length: time and peak memory of the tiny model at 1k..32k tokens.

Each (encoding, length) runs in a fresh subprocess, so one measurement's peak never leaks into
the next. A child builds the tiny model (random weights: cost does not depend on them), takes
one held-out sequence of the length from the built-in text corpus and evaluates it through
posx's own evaluator (``posx.evaluator.evaluate_length``, mode ``full``). It reports:

- seconds and tokens/s of that evaluation (after a short warm-up forward);
- ``peak MiB``: the process's peak RSS while the length ran (CPU; the CUDA allocator's peak
  on GPU), the baseline (interpreter, torch, model, corpus) included;
- ``delta MiB``: that peak minus the memory in use just before the length started.

The summary gives peak(16k)/peak(4k) per encoding: an O(L^2) bias would make it ~16x (a
[h, L, L] float32 bias is 4 GiB at 16k for 4 heads); linear memory keeps it near 1.

    python scripts/bench_eval.py                      # nope rope alibi t5 at 1k 4k 16k 32k
    python scripts/bench_eval.py --encodings alibi --lengths 4096,16384 --device cuda
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

LIMIT = 1.5  # the acceptance bound on peak(16k) / peak(4k)


def child(encoding: str, length: int, device: str, threads: int) -> dict:
    import torch

    from posx.build import build_model, build_task
    from posx.config import compose
    from posx.distributed import pick_device
    from posx.evaluation.protocol import resolve_protocol
    from posx.evaluator import evaluate_length

    if threads:
        torch.set_num_threads(threads)
    cfg = compose(
        [f"encoding={encoding}", "model=tiny", "task=text", f"train.length={min(length, 1024)}"]
    )
    cfg.eval.batch_tokens = cfg.eval.tokens = length  # exactly one sequence of `length` tokens
    dev = pick_device(device)
    torch.manual_seed(0)
    task = build_task(cfg)
    model = build_model(cfg, task.vocab_size).to(dev).eval()
    data = task.eval_set(length, 1, cfg.eval.seed)
    with torch.inference_mode():  # warm-up: first-call dispatch and allocator set-up
        model(data.inputs[:, :128].to(dev))
    proto = resolve_protocol("full", length, None, None, cfg.train.length)
    row, _ = evaluate_length(model, task, data, proto, cfg.eval, dev)
    return {
        "encoding": encoding,
        "length": length,
        "seconds": row["seconds"],
        "tokens_per_s": row["tokens_per_s"],
        "peak_mb": row["peak_mem_mb"],
        "delta_mb": row["mem_delta_mb"],
        "loss": row["loss"],
        "device": dev.type,
        "threads": torch.get_num_threads(),
    }


def measure(encoding: str, length: int, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", encoding, str(length), "--device", args.device]
    cmd += ["--threads", str(args.threads)]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"encoding": encoding, "length": length, "error": f"over {args.timeout}s"}
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return {"encoding": encoding, "length": length, "error": last[:80]}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["wall_s"] = time.perf_counter() - start
    return out


def fmt(x: float, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encodings", default="nope,rope,alibi,t5")
    parser.add_argument("--lengths", default="1024,4096,16384,32768")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per measurement")
    parser.add_argument("--json", help="also write all measurements to this file")
    parser.add_argument("--child", nargs=2, metavar=("ENCODING", "LENGTH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.device, args.threads)))
        return 0

    encodings = [e.strip() for e in args.encodings.split(",") if e.strip()]
    lengths = [int(x) for x in args.lengths.split(",")]
    header = "encoding".ljust(10) + "".join(
        name.rjust(width)
        for name, width in (("length", 8), ("seconds", 10), ("tok/s", 10), ("peak MiB", 10))
    )
    header += "delta MiB".rjust(11)
    print(header)
    print("-" * len(header))
    results = []
    for enc in encodings:
        for length in lengths:
            r = measure(enc, length, args)
            results.append(r)
            if "error" in r:
                print(f"{enc:<10}{length:>8}  did not run: {r['error']}")
            else:
                print(
                    f"{enc:<10}{length:>8}{fmt(r['seconds'], '10.2f')}"
                    f"{fmt(r['tokens_per_s'], '10,.0f')}{fmt(r['peak_mb'], '10.0f')}"
                    f"{fmt(r['delta_mb'], '11.1f')}"
                )
            sys.stdout.flush()
    print(f"\npeak(16k)/peak(4k) per encoding (bound {LIMIT}):")
    failed = False
    by = {(r["encoding"], r["length"]): r for r in results if "error" not in r}
    for enc in encodings:
        a, b = by.get((enc, 4096)), by.get((enc, 16384))
        if a is None or b is None:
            print(f"  {enc:<10} n/a (4k or 16k missing)")
            continue
        ratio = b["peak_mb"] / a["peak_mb"]
        delta = b["delta_mb"] / a["delta_mb"] if a["delta_mb"] > 0 else math.nan
        ok = ratio <= LIMIT
        failed |= not ok
        print(
            f"  {enc:<10} {ratio:5.2f}  {'ok' if ok else 'OVER'}   "
            f"(delta ratio {fmt(delta, '.2f')}; 4x = linear for 4x the tokens)"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
