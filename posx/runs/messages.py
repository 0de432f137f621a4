"""What ``posx train`` tells the user: where the run is, what it measured, what to do next.

Each function returns lines; the caller logs them (a run's lines also land in its
``posx.log``) or prints them (a sweep's, which belong to no single run).
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from posx.report.units import NAMES, auto_metric, fixed, unit
from posx.training.progress import duration


def _path(path: Path) -> str:
    return shlex.quote(str(path))


def eval_table(
    rows: Sequence[dict[str, Any]],
    train_length: int,
    earlier: Sequence[dict[str, Any]] = (),
) -> list[str]:
    """The run's eval rows as aligned lines in the report's metric, with ×r (relative to the
    training length) and the reason for any length without a value.

    Args:
        rows: The rows to show.
        train_length: The run's training length.
        earlier: Rows the run had already (its ``eval.csv``): the value at the training
            length comes from them when ``rows`` do not hold it (``posx eval RUN --lengths
            256,512``), from a row with the same overrides.
    """
    ok = [r for r in rows if r.get("status", "ok") == "ok"]
    metric = auto_metric(ok[0]) if ok else "loss"
    overrides = {str(r.get("overrides") or "") for r in ok}
    at_train = [
        r
        for r in [*ok, *earlier]
        if r.get("eval_length") == train_length
        and r.get("mode") == "full"
        and r.get("status", "ok") == "ok"
        and str(r.get("overrides") or "") in overrides
        and isinstance(r.get(metric), int | float)
    ]
    reference = float(at_train[0][metric]) if at_train else math.nan
    shown = {r["eval_length"] for r in ok}
    ratios = math.isfinite(reference) and reference != 0 and len(shown - {train_length}) > 0
    head = f"eval: {NAMES.get(metric, metric)} [{unit(metric)}]"
    lines = [head + (f", ×r = relative to L={train_length}" if ratios else "")]
    width = max(len(str(r["eval_length"])) for r in rows) if rows else 1
    for r in sorted(rows, key=lambda r: (r["eval_length"], r.get("mode", ""))):
        head = f"  L={r['eval_length']:<{width}}"
        if r.get("mode", "full") != "full":
            head += f" ({r['mode']})"
        if r.get("status", "ok") != "ok":
            lines.append(f"{head}  {r['status']}: {r.get('reason') or 'no reason recorded'}")
            continue
        value = float(r[metric])
        text = f"{head}  {fixed(value, 4)}"
        if ratios and r["eval_length"] != train_length:
            text += f"  ×{fixed(value / reference, 2)}"
        lines.append(text)
    return lines


def run_summary(
    run_dir: Path,
    summary: dict[str, Any],
    rows: Sequence[dict[str, Any]] | None,
    train_length: int,
) -> list[str]:
    """The lines logged when a run ends: its training numbers and its eval table.

    Args:
        run_dir: The run directory.
        summary: ``train``'s summary (final loss, tokens/s, seconds, parameters).
        rows: The eval rows written at the end of training, or None when it did not evaluate.
        train_length: ``train.length``.
    """
    lines = [
        f"done: {run_dir}",
        f"trained in {duration(summary['seconds'])}: final loss {summary['final_loss']:.4f} "
        f"{unit('loss')}, {summary['tokens_per_s']:,.0f} tok/s, "
        f"{summary['parameters']:,} parameters",
    ]
    return lines + (eval_table(rows, train_length) if rows else [])


def next_commands(run_dir: Path, root: Path, lengths: Sequence[int]) -> list[str]:
    """What to run after a single run: compare it, evaluate it further."""
    longer = f"{2 * max(lengths)},{4 * max(lengths)}" if lengths else "1024,2048"
    return [
        "next:",
        f"  posx report --root {_path(root)}    # compare with the other runs",
        f"  posx eval {_path(run_dir)} --lengths {longer}    # evaluate at longer lengths",
    ]


def sweep_summary(
    sweep_dir: Path, jobs: int, failed: Sequence[str], compare: Path | None = None
) -> list[str]:
    """The lines printed when a sweep ends; ``compare``: the root ``posx report`` compares
    them under (default the sweep; for extensions one that holds their parent too)."""
    status = f"{jobs} job(s)" + (f", {len(failed)} failed" if failed else "")
    compare = compare or sweep_dir
    what = "the sweep's runs" if compare == sweep_dir else "the sweep's runs with their parent"
    return [
        f"sweep done: {status} in {sweep_dir}",
        "next:",
        f"  posx sweep status {_path(sweep_dir)}    # which jobs finished",
        f"  posx report --root {_path(compare)}    # compare {what}",
    ]
