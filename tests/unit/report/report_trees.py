"""Result trees for the report tests: run directories with eval.csv, eval_positions.csv,
metrics.csv and run.json, written directly (no training)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

ENCODINGS = {"rope": [2.0, 2.6, 4.0], "alibi": [2.0, 2.1, 2.2], "learned": [1.9, None, None]}


def make_tree(root: Path, positions: bool = True) -> None:
    """Two seeds of three encodings: eval.csv, eval_positions.csv, metrics.csv, run.json."""
    for enc, losses in ENCODINGS.items():
        for seed in (0, 1):
            run = root / "runs" / f"copy_{enc}_s{seed}"
            run.mkdir(parents=True)
            ident = {"schema_version": 1, "run": run.name, "encoding": enc, "task": "copy",
                     "model": "tiny", "seed": seed, "train_length": 16}  # fmt: skip
            (run / "run.json").write_text(json.dumps(ident))
            evals, buckets = [], []
            for length, loss in zip((16, 32, 64), losses, strict=True):
                ok = loss is not None
                key = {**ident, "mode": "full", "overrides": "", "eval_length": length,
                       "window": length, "stride": length}  # fmt: skip
                evals.append({**key, "status": "ok" if ok else "unsupported",
                              "reason": "" if ok else "too long",
                              "loss": loss + 0.1 * seed if ok else math.nan})  # fmt: skip
                if ok:
                    for start in range(0, length, 8):
                        buckets.append({**key, "status": "ok", "reason": "", "bucket_start": start,
                                        "bucket_end": start + 8, "tokens": 8,
                                        "loss": loss + start / 64, "acc": 0.5})  # fmt: skip
            pd.DataFrame(evals).to_csv(run / "eval.csv", index=False)
            if positions:
                pd.DataFrame(buckets).to_csv(run / "eval_positions.csv", index=False)
            steps = pd.DataFrame({"step": [10, 20, 30], "loss": [3.0, 2.5, 2.0 + seed / 10]})
            steps.to_csv(run / "metrics.csv", index=False)


YARN = "encoding.scaling.factor=4 encoding.scaling.type=yarn"
NTK = "encoding.scaling.factor=8 encoding.scaling.type=ntk"


def make_exact_tree(root: Path, buckets: list[tuple[int, int]] | None = None) -> None:
    """rope with two eval-time variants, exact match all zero, per-position acc in buckets."""
    run = root / "runs" / "copy_rope_s0"
    run.mkdir(parents=True)
    ident = {"schema_version": 1, "run": run.name, "encoding": "rope", "task": "copy",
             "model": "tiny", "seed": 0, "train_length": 16}  # fmt: skip
    (run / "run.json").write_text(json.dumps(ident))
    evals, rows = [], []
    for overrides in ("", YARN, NTK):
        for length in (16, 32, 64):
            key = {**ident, "mode": "full", "overrides": overrides, "eval_length": length,
                   "window": length, "stride": length, "status": "ok", "reason": ""}  # fmt: skip
            evals.append({**key, "loss": 2.0, "acc": 0.3, "exact_match": 0.0})
            for start, end in buckets or [(0, length)]:
                if end <= length:
                    rows.append({**key, "bucket_start": start, "bucket_end": end, "tokens": 8,
                                 "loss": 2.0 + start / 64, "acc": 0.3})  # fmt: skip
    pd.DataFrame(evals).to_csv(run / "eval.csv", index=False)
    pd.DataFrame(rows).to_csv(run / "eval_positions.csv", index=False)


LOG_BUCKETS = [(0, 1), (1, 2), (2, 4), (4, 8), (8, 16), (16, 32), (32, 64)]


# Issue 24: exact match at the training length (16) and past it (32, 64), run as shipped.
ISSUE_24 = {
    "copy": {"nope": (0.002, 0.0, 0.0), "t5": (0.109, 0.01, 0.0), "alibi": (0.963, 0.6, 0.3),
             "rope": (0.887, 0.1, 0.0), "sinusoidal": (0.232, 0.0, 0.0)},
    "parity": {"nope": (0.51, 0.50, 0.49), "t5": (0.52, 0.51, 0.50), "alibi": (0.50, 0.52, 0.51),
               "rope": (0.51, 0.49, 0.50), "sinusoidal": (0.49, 0.51, 0.52)},
    "addition": {enc: (0.0, 0.0, 0.0) for enc in ("nope", "t5", "alibi", "rope", "sinusoidal")},
}  # fmt: skip
CHANCE = {"copy": 0.0, "parity": 0.5, "addition": 0.0}


def make_issue24_tree(root: Path, chance: bool = True) -> None:
    """One seed per (task, encoding) of ``ISSUE_24``; ``chance=False`` writes eval.csv as runs
    evaluated before the ``chance`` column existed."""
    for task, runs in ISSUE_24.items():
        for enc, values in runs.items():
            run = root / "runs" / f"{task}_{enc}_s0"
            run.mkdir(parents=True)
            ident = {"schema_version": 1, "run": run.name, "encoding": enc, "task": task,
                     "model": "tiny", "seed": 0, "train_length": 16}  # fmt: skip
            (run / "run.json").write_text(json.dumps(ident))
            rows = [
                {
                    **ident,
                    "mode": "full",
                    "overrides": "",
                    "eval_length": length,
                    "window": length,
                    "stride": length,
                    "status": "ok",
                    "reason": "",
                    "loss": 1.0,
                    "acc": value,
                    "exact_match": value,
                    "sequences": 1000,
                    **({"chance": CHANCE[task]} if chance else {}),
                }  # fmt: skip
                for length, value in zip((16, 32, 64), values, strict=True)
            ]
            pd.DataFrame(rows).to_csv(run / "eval.csv", index=False)


def make_seed_tree(
    root: Path,
    values: dict[str, list[list[float | None]]],
    experiment: str = "demo_claims",
    task: str = "text",
    train_length: int = 16,
    lengths: tuple[int, ...] = (16, 32, 64),
) -> None:
    """Runs with several seeds, for claims: ``values[label][seed][i]`` is the metric (bpb for
    text, exact_match otherwise) at ``lengths[i]``; None is an unsupported length. A label
    ``enc+yarn×4`` is written as an eval-time variant (its overrides) of ``enc``'s runs."""
    metric = "bpb" if task == "text" else "exact_match"
    for label, seeds in values.items():
        encoding, _, variant = label.partition("+")
        overrides = ""
        if variant:
            kind, _, factor = variant.partition("×")
            overrides = f"encoding.scaling.factor={factor} encoding.scaling.type={kind}"
        for seed, per_length in enumerate(seeds):
            run = root / "runs" / f"{task}_{encoding}_s{seed}"
            run.mkdir(parents=True, exist_ok=True)
            ident = {"schema_version": 1, "run": run.name, "encoding": encoding, "task": task,
                     "model": "tiny", "seed": seed, "train_length": train_length}  # fmt: skip
            (run / "run.json").write_text(json.dumps({**ident, "experiment": experiment}))
            rows = []
            for length, value in zip(lengths, per_length, strict=True):
                ok = value is not None
                rows.append({**ident, "mode": "full", "overrides": overrides,
                             "eval_length": length, "window": length, "stride": length,
                             "status": "ok" if ok else "unsupported",
                             "reason": "" if ok else "too long",
                             "loss": value if ok else math.nan,
                             metric: value if ok else math.nan})  # fmt: skip
            frame = pd.DataFrame(rows)
            if (run / "eval.csv").is_file():
                frame = pd.concat([pd.read_csv(run / "eval.csv", keep_default_na=False,
                                               na_values=[""]), frame])  # fmt: skip
            frame.to_csv(run / "eval.csv", index=False)


# The columns that identify one eval.csv row: posx replaces a row with the same ones
# (posx.evaluation.sweep.ROW_KEYS).
ROW_KEYS = ["eval_length", "mode", "window", "stride", "overrides"]


def make_eval_tree(
    root: Path,
    values: dict[str, tuple[float, ...]],
    *,
    task: str = "copy",
    mode: str = "sliding",
    window: int | None = None,
    stride: int | None = None,
    train_length: int = 8,
    lengths: tuple[int, ...] = (8, 16, 32),
) -> None:
    """One seed per encoding of ``values`` (exact match at each of ``lengths``), evaluated in
    ``mode`` with ``eval.window``/``eval.stride`` as given (None = posx's default); each row
    records the protocol posx's evaluator resolves. Called again on the same root, it merges
    the rows into each run's eval.csv as ``posx eval`` does (same protocol: replaced)."""
    from posx.evaluation.protocol import resolve_protocol

    for enc, per_length in values.items():
        run = root / "runs" / f"{task}_{enc}_s0"
        run.mkdir(parents=True, exist_ok=True)
        ident = {"schema_version": 1, "run": run.name, "encoding": enc, "task": task,
                 "model": "tiny", "seed": 0, "train_length": train_length}  # fmt: skip
        (run / "run.json").write_text(json.dumps(ident))
        rows = []
        for length, value in zip(lengths, per_length, strict=True):
            proto = resolve_protocol(mode, length, window, stride, train_length)
            rows.append({**ident, "mode": mode, "overrides": "", "eval_length": length,
                         "window": proto.window, "stride": proto.stride, "status": "ok",
                         "reason": "", "loss": 1.0 - value / 2, "acc": value,
                         "exact_match": value, "sequences": 1000, "chance": 0.0})  # fmt: skip
        frame = pd.DataFrame(rows)
        path = run / "eval.csv"
        if path.is_file():
            old = pd.read_csv(path, keep_default_na=False, na_values=[""])
            old["overrides"] = old["overrides"].astype(object).fillna("")  # empty reads back as NaN
            frame = pd.concat([old, frame]).drop_duplicates(ROW_KEYS, keep="last")
        frame.to_csv(path, index=False)
