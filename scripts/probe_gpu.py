"""Where a bias encoding's and RoPE's time goes on CUDA (issue 58): one kernel at a time.

`make bench-gpu` measured, at the GPT-2-small shape on an H200, alibi and t5 (FlexAttention with
a per-distance table) at 0.13-0.16 of flash SDPA in evaluation and 0.38-0.60 in training, and
RoPE at 0.74 in training. This probe times the parts alone, at the same shapes, bf16:

- attention: flash SDPA (causal); FlexAttention with the causal block mask and no score_mod;
  ALiBi as a ``score_mod`` computed from the indices (``q_idx - kv_idx``: positions are the
  default ``arange``); ALiBi computed from positions read in the kernel (explicit positions);
  posx's route (positions read, then the per-distance table read: ``flex_bias_attention``);
- rotation: posx's ``RoPE.rotate`` of q and k, and the plain rotate-half with cached bf16
  cos/sin, forward and backward.

Each at evaluation (one sequence, forward) and training (forward and backward); the median of
CUDA-event timings after warm-up calls (which compile). Rows go to ``--out/probe.csv`` as they
finish, and the table is printed. On a CPU (or ``--tiny``) tiny shapes with FlexAttention's
eager forward: the script's own test.

    python scripts/probe_gpu.py --out results/probe
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

ROOT = Path(__file__).resolve().parents[1]


def timed(fn: Callable[[], object], device: torch.device, reps: int, warmup: int = 2) -> float:
    """Median milliseconds of ``fn`` after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def attention_routes(h: int, device: torch.device, compile: bool) -> dict[str, Callable]:
    """``name -> (q, k, v, pos) -> out`` for each attention route."""
    from posx.encodings.alibi import ALiBi
    from posx.kernels.flex.attention import causal_flex, flex_bias_attention, position_reader

    alibi = ALiBi(h).to(device)
    slopes = alibi.slopes

    def alibi_from_indices(score, b, hh, q_idx, kv_idx):
        return score - (slopes[hh] * (q_idx - kv_idx)).to(score.dtype)

    def alibi_from_positions(q, k, v, pos):
        pair = position_reader(pos, pos)

        def mod(score, b, hh, q_idx, kv_idx):
            qp, kp = pair(b, q_idx, kv_idx)
            return score - (slopes[hh] * (qp - kp)).to(score.dtype)

        return causal_flex(q, k, v, mod, compile=compile)

    return {
        "sdpa_flash": lambda q, k, v, pos: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "flex_no_mod": lambda q, k, v, pos: causal_flex(q, k, v, None, compile=compile),
        "flex_alibi_indices": lambda q, k, v, pos: causal_flex(
            q, k, v, alibi_from_indices, compile=compile
        ),
        "flex_alibi_positions": alibi_from_positions,
        "flex_table_posx": lambda q, k, v, pos: flex_bias_attention(
            q, k, v, pos, pos, alibi.bias, compile=compile
        ),
    }


def rotations(d: int, s: int, device: torch.device) -> dict[str, Callable]:
    """``name -> (q, k, pos) -> (q', k')`` for each rotation."""
    from posx.encodings.rope import RoPE

    rope = RoPE(d).to(device)
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=device).float() / d))
    angles = torch.outer(torch.arange(s, device=device).float(), inv)
    cos = torch.cat((angles, angles), -1).cos().to(torch.bfloat16)
    sin = torch.cat((angles, angles), -1).sin().to(torch.bfloat16)

    def half(x: Tensor) -> Tensor:
        a, b = x.chunk(2, -1)
        return torch.cat((-b, a), -1)

    return {
        "rope_posx": lambda q, k, pos: rope.rotate(q, k, pos, pos),
        "rope_rotate_half": lambda q, k, pos: (q * cos + half(q) * sin, k * cos + half(k) * sin),
    }


def measure(args: argparse.Namespace) -> list[dict]:
    import pandas as pd

    from posx.storage.results import write_csv

    dev = args.device
    b_train, s_train, s_eval, h, d = (
        (8, 1024, 16384, 12, 64) if not args.tiny else (2, 64, 256, 2, 16)
    )
    rows: list[dict] = []

    def record(what: str, phase: str, length: int, fn: Callable[[], object]) -> None:
        try:
            ms = timed(fn, dev, args.reps)
            rows.append({"what": what, "phase": phase, "length": length, "ms": round(ms, 4)})
        except Exception as e:  # noqa: BLE001 - a route that fails is a row saying so
            note = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
            rows.append({"what": what, "phase": phase, "length": length, "ms": None, "note": note})
        print(rows[-1], flush=True)
        write_csv(args.out / "probe.csv", pd.DataFrame(rows))

    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    gen = torch.Generator(device=dev).manual_seed(0)

    def qkv(b: int, s: int, grad: bool) -> list[Tensor]:
        return [torch.randn(b, h, s, d, device=dev, dtype=dtype, generator=gen).requires_grad_(grad)
                for _ in range(3)]  # fmt: skip

    routes = attention_routes(h, dev, compile=dev.type == "cuda")
    for name, route in routes.items():
        q, k, v = qkv(1, s_eval, False)
        pos = torch.arange(s_eval, device=dev)
        with torch.inference_mode():
            record(name, "eval", s_eval, lambda r=route, q=q, k=k, v=v, p=pos: r(q, k, v, p))
        if dev.type == "cuda":  # FlexAttention has no backward on the CPU
            q, k, v = qkv(b_train, s_train, True)
            pos = torch.arange(s_train, device=dev)
            step = lambda r=route, q=q, k=k, v=v, p=pos: r(q, k, v, p).sum().backward()  # noqa: E731
            record(name, "train", s_train, step)
    for name, rot in rotations(d, s_train, dev).items():
        q, k, _ = qkv(b_train, s_train, True)
        pos = torch.arange(s_train, device=dev)

        def step(r=rot, q=q, k=k, p=pos) -> None:
            qr, kr = r(q, k, p)
            (qr.float().sum() + kr.float().sum()).backward()

        record(name, "train", s_train, step)
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--out", type=Path, default=ROOT / "results" / "probe_gpu")
    args = p.parse_args()
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    args.device = torch.device(args.device)
    args.tiny = args.tiny or args.device.type != "cuda"
    args.out.mkdir(parents=True, exist_ok=True)
    rows = measure(args)
    base = {(r["phase"]): r["ms"] for r in rows if r["what"] == "sdpa_flash"}
    print("| what | phase | length | ms | ÷ flash time |\n|---|---|---:|---:|---:|")
    for r in rows:
        ratio = r["ms"] / base[r["phase"]] if r["ms"] and base.get(r["phase"]) else None
        print(f"| {r['what']} | {r['phase']} | {r['length']} | {r['ms']} | "
              f"{'-' if ratio is None else f'{ratio:.2f}'} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
