"""Synthetic-task generator speed against the model step it feeds.

For every synthetic task yaml, times ``task.train_batch(batch, length)`` (median of ``--reps``)
and one training step (forward, backward, AdamW) of the ``model=tiny`` LM on a batch of the
same shape, and prints the ratio. A generator is fast enough when the ratio is far below 1.

    .venv/bin/python scripts/bench_tasks.py                      # 256 x 512, all tasks
    .venv/bin/python scripts/bench_tasks.py --tasks copy,passkey --length 2048 --batch 64
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from posx.config.build import build_model, build_task
from posx.config.compose import compose
from posx.config.paths import choices
from posx.errors import ConfigError
from posx.runtime.distributed import pick_device
from posx.training.losses import masked_loss

TEXT_TASKS = {"text", "shakespeare"}


def median_seconds(fn: Callable[[], object], reps: int, sync: Callable[[], None]) -> float:
    fn()  # warm-up
    sync()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="all", help="comma-separated task names, or all")
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--encoding", default="rope")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    names = [n for n in choices("task") if n not in TEXT_TASKS]
    if args.tasks != "all":
        names = args.tasks.split(",")

    cfg = compose([f"model={args.model}", f"encoding={args.encoding}", "task=copy"])
    model = build_model(cfg, vocab_size=64).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = build_task(cfg).train_batch(args.batch, args.length, torch.Generator().manual_seed(0))
    batch = batch.to(device)

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = masked_loss(model(batch.inputs), batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step_s = median_seconds(step, max(1, min(args.reps, 3)), sync)
    print(
        f"model={args.model} encoding={args.encoding} device={device.type} "
        f"threads={torch.get_num_threads()} batch={args.batch} length={args.length}"
    )
    print(f"model step: {step_s * 1e3:.1f} ms")
    print(f"{'task':<16}{'generate ms':>12}{'vs step':>10}")
    worst = 0.0
    for name in names:
        task = build_task(compose([f"task={name}"]))
        gen = torch.Generator().manual_seed(0)
        try:  # a task whose defaults do not reach this length (cwe's item alphabet) says why
            task.train_batch(1, args.length, gen)
        except ConfigError as err:
            print(f"{name:<16}{'n/a':>12}  {err}")
            continue
        s = median_seconds(
            lambda t=task, g=gen: t.train_batch(args.batch, args.length, g), args.reps, lambda: None
        )
        worst = max(worst, s / step_s)
        print(f"{name:<16}{s * 1e3:>12.2f}{s / step_s:>10.4f}")
    print(f"worst generator / step ratio: {worst:.4f}")


if __name__ == "__main__":
    main()
