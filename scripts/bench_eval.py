"""Evaluator cost per length: time and peak memory of the tiny model, every encoding, up to 32k.

Each (encoding, length) runs in a fresh subprocess, so one measurement's peak never leaks into
the next. A child builds the tiny model (random weights: cost does not depend on them), takes
one held-out sequence of the length from the built-in text corpus and evaluates it through
posx's own evaluator (``posx.evaluation.sweep.evaluate_length``, mode ``full``). It reports:

- seconds and tokens/s of that evaluation (after a short warm-up forward);
- ``peak MiB``: the process's peak RSS while the length ran (CPU; the CUDA allocator's peak
  on GPU), the baseline (interpreter, torch, model, corpus) included;
- ``delta MiB``: that peak minus the memory in use just before the length started.

The model is built with ``train.length = min(length, 1024)``; an encoding that cannot represent
the length that way (a learned table of ``train.length`` rows) gets ``train.length = length``,
marked ``*``: what is measured is the cost of evaluating that many tokens.

The summary gives peak(32k)/peak(8k) per encoding (``--ratio``), the acceptance bound 1.5: memory
linear in the length keeps it near 1 (the baseline dominates), an O(L^2) term makes it ~16x.

    python scripts/bench_eval.py                        # every encoding at 2k 8k 32k
    python scripts/bench_eval.py --encodings alibi,shaw --lengths 4096,16384 --ratio 4096,16384
    python scripts/bench_eval.py --markdown results/bench_eval.md   # also the docs' table
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

LIMIT = 1.5  # the acceptance bound on peak(32k) / peak(8k)
ROOT = Path(__file__).resolve().parents[1]


def child(encoding: str, length: int, device: str, threads: int) -> dict:
    import torch

    from posx.config.build import build_model, build_task
    from posx.config.compose import compose
    from posx.evaluation.protocol import resolve_protocol
    from posx.evaluation.sweep import evaluate_length
    from posx.runtime.distributed import pick_device

    if threads:
        torch.set_num_threads(threads)

    def config(train_length: int):  # noqa: ANN202 - a DictConfig
        cfg = compose(
            [f"encoding={encoding}", "model=tiny", "task=text", f"train.length={train_length}"]
        )
        cfg.eval.batch_tokens = cfg.eval.tokens = length  # exactly one sequence of `length`
        return cfg

    cfg = config(min(length, 1024))
    dev = pick_device(device)
    torch.manual_seed(0)
    task = build_task(cfg)
    model = build_model(cfg, task.vocab_size)
    sized = model.encoding.unsupported_reason(length) is not None
    if sized:  # e.g. a learned table: give it `length` rows
        cfg = config(length)
        model = build_model(cfg, task.vocab_size)
    model = model.to(dev).eval()
    data = task.eval_set(length, 1, cfg.eval.seed)
    with torch.inference_mode():  # warm-up: first-call dispatch and allocator set-up
        model(data.inputs[:, :128].to(dev))
    proto = resolve_protocol("full", length, None, None, cfg.train.length)
    row, _ = evaluate_length(model, task, data, proto, cfg.eval, dev)
    return {
        "encoding": encoding,
        "length": length,
        "train_length": cfg.train.length,
        "sized_to_length": sized,
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
        return {"encoding": encoding, "length": length, "error": last[:100]}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["wall_s"] = time.perf_counter() - start
    return out


def fmt(x: float | None, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def ratios(results: list[dict], encodings: list[str], low: int, high: int) -> dict[str, float]:
    """peak(high) / peak(low) per encoding (NaN where either length did not run)."""
    by = {(r["encoding"], r["length"]): r for r in results if "error" not in r}
    out = {}
    for enc in encodings:
        a, b = by.get((enc, low)), by.get((enc, high))
        out[enc] = b["peak_mb"] / a["peak_mb"] if a and b else math.nan
    return out


def label(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def markdown(
    results: list[dict], lengths: list[int], ratio: dict[str, float], low: int, high: int
) -> str:
    """The docs' table: peak MiB per length, seconds at the longest, peak(high)/peak(low)."""
    by = {(r["encoding"], r["length"]): r for r in results}
    longest = max(lengths)
    head = ["encoding", *(f"peak MiB {label(n)}" for n in lengths), f"s at {label(longest)}"]
    head.append(f"peak({label(high)}) / peak({label(low)})")
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for enc in ratio:
        cells = [enc]
        for n in lengths:
            r = by.get((enc, n), {})
            mark = "*" if r.get("sized_to_length") else ""
            cells.append("failed" if "error" in r else fmt(r.get("peak_mb"), ",.0f") + mark)
        cells.append(fmt(by.get((enc, longest), {}).get("seconds"), ",.1f"))
        cells.append(fmt(ratio[enc], ".2f"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def encoding_names() -> list[str]:
    return sorted(p.stem for p in (ROOT / "configs" / "encoding").glob("*.yaml"))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encodings", default="all", help="comma-separated, or all")
    parser.add_argument("--lengths", default="2048,8192,32768")
    parser.add_argument(
        "--ratio", default="8192,32768", help="LOW,HIGH: report peak(HIGH)/peak(LOW)"
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per measurement")
    parser.add_argument("--json", help="also write all measurements to this file")
    parser.add_argument("--markdown", help="also write the summary table (markdown) here")
    parser.add_argument("--child", nargs=2, metavar=("ENCODING", "LENGTH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    known = encoding_names()
    args.encodings = known if args.encodings == "all" else args.encodings.split(",")
    args.encodings = [e.strip() for e in args.encodings if e.strip()]
    unknown = sorted(set(args.encodings) - set(known))
    if unknown:
        parser.error(f"unknown encoding {', '.join(unknown)}; choose from {', '.join(known)}")
    try:
        args.lengths = [int(x) for x in args.lengths.split(",")]
        args.ratio = tuple(int(x) for x in args.ratio.split(","))
    except ValueError:
        parser.error("--lengths and --ratio take integers like 2048,8192")
    if len(args.ratio) != 2 or not set(args.ratio) <= set(args.lengths):
        parser.error(f"--ratio takes two of --lengths {args.lengths}, got {args.ratio}")
    return args


def main() -> int:
    args = parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.device, args.threads)))
        return 0

    header = "encoding".ljust(16) + "".join(
        name.rjust(width)
        for name, width in (("length", 8), ("seconds", 10), ("tok/s", 10), ("peak MiB", 10))
    )
    header += "delta MiB".rjust(11)
    print(header)
    print("-" * len(header))
    results = []
    for enc in args.encodings:
        for length in args.lengths:
            r = measure(enc, length, args)
            results.append(r)
            if "error" in r:
                print(f"{enc:<16}{length:>8}  did not run: {r['error']}")
            else:
                mark = "  * train.length = length" if r["sized_to_length"] else ""
                print(
                    f"{enc:<16}{length:>8}{fmt(r['seconds'], '10.2f')}"
                    f"{fmt(r['tokens_per_s'], '10,.0f')}{fmt(r['peak_mb'], '10.0f')}"
                    f"{fmt(r['delta_mb'], '11.1f')}{mark}"
                )
            sys.stdout.flush()
    low, high = args.ratio
    ratio = ratios(results, args.encodings, low, high)
    print(f"\npeak({high})/peak({low}) per encoding (bound {LIMIT}):")
    failed = any("error" in r for r in results)
    for enc, value in ratio.items():
        ok = value <= LIMIT
        failed |= not ok
        verdict = "ok" if ok else "n/a (a length did not run)" if math.isnan(value) else "OVER"
        print(f"  {enc:<16} {fmt(value, '5.2f')}  {verdict}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    if args.markdown:
        Path(args.markdown).write_text(markdown(results, args.lengths, ratio, low, high))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # measure this checkout's posx, not an installed one
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
