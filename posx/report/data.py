"""Loads the result tables below a root and selects the rows a report shows.

Three tables feed a report: every run's ``eval.csv`` (one row per eval length and protocol),
``eval_positions.csv`` (loss per position bucket; optional, older runs lack it) and
``metrics.csv`` (the training curve, identified through ``run.json``). Eval and position rows
carry their run's config fingerprint and config keys (:mod:`posx.report.configs`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from posx.config.variant_names import canonical, long_label, short_label
from posx.config.variant_names import matches as variant_matches
from posx.errors import ConfigError, PosxError, PosxWarning
from posx.report.configs import PREFIX, attach_configs, config_column
from posx.report.damage import INTEGER_COLUMNS, table_problem
from posx.report.units import AUTO_METRICS
from posx.saved import SavedRun
from posx.storage.results import find_runs

# One table per combination of these; `--by` moves some of them into the row labels instead.
# length_unit splits tables too: a column never holds 128 bytes beside 128 tokens.
IDENTITY = ["task", "train_length", "length_unit", "model", "mode"]
BY_CHOICES = ("task", "model", "train_length", "mode", "seed")
LOWER_IS_BETTER = {
    "loss": True,
    "ppl": True,
    "bpb": True,
    "acc": False,
    "exact_match": False,
    "score": False,  # RULER's, percent
    "seconds": True,
    "tokens_per_s": False,
    "peak_mem_mb": True,
}
METRICS = ("loss", "ppl", "bpb", "acc", "exact_match")
# Columns that describe a row rather than measure it; never offered as a metric.
NOT_METRICS = {
    "schema_version",
    "seed",
    "train_length",
    "eval_seed",
    "window",
    "stride",
    "eval_length",
    "tokens",
    "bytes",
    "max_context",
    "sequences",
    "bucket_start",
    "bucket_end",
    "run_time",
    "chance",  # the task's chance level: a property of the eval set, not a measurement
    "steps_done",  # how far the evaluated checkpoint was trained
    "steps_planned",
}


def lower_is_better(metric: str) -> bool:
    """Direction of a metric; unknown columns named ``acc*``/``exact*`` are accuracies."""
    if metric in LOWER_IS_BETTER:
        return LOWER_IS_BETTER[metric]
    return not metric.startswith(("acc", "exact"))


def _read_tables(root: Path, name: str) -> tuple[list[pd.DataFrame], list[str]]:
    """Every run's table ``name`` below ``root``, and a one-line reason per damaged one
    (unreadable, foreign or newer), which is left out."""
    frames, damaged = [], []
    for run in find_runs(root):
        path = run / name
        if not path.is_file():
            continue
        try:
            # A fingerprint of digits only must stay text, not become a number.
            frame = pd.read_csv(
                path, keep_default_na=False, na_values=[""], dtype={"fingerprint": str}
            )
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
            damaged.append(f"cannot read {path}: {str(err).splitlines()[0]}")
            continue
        problem = table_problem(frame, name)
        if problem:
            damaged.append(f"cannot read {path}: {problem}")
            continue
        for col in [c for c in INTEGER_COLUMNS if c in frame]:
            frame[col] = pd.to_numeric(frame[col])  # big integers read as Python ints
        # Run names repeat across sweeps (job numbers restart), so the directory identifies a run.
        frame["run_dir"] = str(run.relative_to(root))
        frames.append(frame)
    return frames, damaged


def _skip(damaged: list[str]) -> None:
    for why in damaged:
        warnings.warn(f"skipping: {why}", PosxWarning, stacklevel=3)


def tokenizer_unit(sha256: str) -> str:
    """The length unit of a pretrained model's rows: its tokens, named by its tokenizer
    (``tokens (tokenizer 1a2b3c4d)``, the SHA-256 of its definition that ``run.json``
    records), so a length column never holds another tokenizer's tokens (``length_unit``
    splits tables)."""
    return f"tokens (tokenizer {sha256[:8]})"


def load_evals(root: Path) -> pd.DataFrame:
    """Every ``eval.csv`` row below ``root``, normalised; a damaged table is skipped with a
    warning, and when every one is damaged (or there are none) it is an error."""
    frames, damaged = _read_tables(root, "eval.csv")
    if not frames and damaged:
        more = f" (and {len(damaged) - 1} more damaged eval.csv)" if len(damaged) > 1 else ""
        raise PosxError(f"{damaged[0]}{more}; nothing left to report")
    if not frames:
        raise ConfigError(f"no eval.csv found under {root}; run `posx train` or `posx eval` first")
    _skip(damaged)
    frame = byte_units(attach_configs(normalize(pd.concat(frames, ignore_index=True)), root))
    return tokenizer_units(frame, root)


def tokenizer_units(frame: pd.DataFrame, root: Path) -> pd.DataFrame:
    """Rows of pretrained models evaluated before their rows named their tokenizer say
    ``tokens``; their ``run.json`` records the tokenizer (:func:`tokenizer_unit`)."""
    old = frame["length_unit"] == "tokens"
    if "model" in frame:
        old &= frame["model"] == "pretrained"
    for run in frame.loc[old, "run_dir"].unique() if "run_dir" in frame else []:
        recorded = SavedRun(root / run).recorded.get("pretrained")
        tokenizer = recorded.get("tokenizer") if isinstance(recorded, dict) else None
        sha = tokenizer.get("sha256") if isinstance(tokenizer, dict) else None
        if isinstance(sha, str) and sha:
            frame.loc[old & (frame["run_dir"] == run), "length_unit"] = tokenizer_unit(sha)
    return frame


def byte_units(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows of byte-level text runs written before a text task recorded ``bytes`` say
    ``tokens``; their saved config (``task.tokenizer=byte``) tells them apart."""
    column = config_column("task.tokenizer")
    if column in frame:
        old = (frame[column] == "byte") & (frame["length_unit"] == "tokens")
        frame.loc[old, "length_unit"] = "bytes"
    return frame


def load_positions(root: Path) -> pd.DataFrame | None:
    """Every ``eval_positions.csv`` row below ``root`` (damaged ones skipped with a warning),
    or None when no run has one."""
    frames, damaged = _read_tables(root, "eval_positions.csv")
    _skip(damaged)
    if not frames:
        return None
    frame = byte_units(attach_configs(normalize(pd.concat(frames, ignore_index=True)), root))
    return tokenizer_units(frame, root)


def load_training(root: Path) -> pd.DataFrame | None:
    """Every run's ``metrics.csv`` with its identity from ``run.json``; None when none exist.
    A damaged ``metrics.csv`` or ``run.json`` leaves that run's curve out, with a warning."""
    tables, damaged = _read_tables(root, "metrics.csv")
    frames = []
    for frame in (f for f in tables if len(f)):
        try:
            info = SavedRun(root / frame["run_dir"].iloc[0]).info
        except PosxError as err:
            damaged.append(str(err))
            continue
        for key in ("encoding", "task", "model", "seed", "train_length"):
            frame[key] = info.get(key)
        frames.append(frame)
    _skip(damaged)
    return pd.concat(frames, ignore_index=True) if frames else None


def normalize(frame: pd.DataFrame) -> pd.DataFrame:
    """Fills the identity columns that CSV round trips leave empty and adds ``variant``."""
    frame = frame.copy()
    # An all-empty text column reads back as float NaN; go through object to fill it.
    # Rows written before posx recorded a length unit counted tokens.
    always = {"overrides": "", "mode": "full", "length_unit": "tokens"}
    for col, default in {**always, "status": "ok", "reason": ""}.items():
        if col in frame or col in always:
            values = frame[col] if col in frame else pd.Series(default, index=frame.index)
            frame[col] = values.astype(object).fillna(default).astype(str)
    for col in ("train_length", "eval_length", "seed"):
        if col in frame:
            frame[col] = frame[col].astype(int)
    frame["variant"] = variant_labels(frame["encoding"].astype(str), frame["overrides"])
    partial = partial_rows(frame)
    if partial.any():  # a run evaluated before its last step is never shown as a finished one
        done = frame.loc[partial, "steps_done"].astype(int).astype(str)
        planned = frame.loc[partial, "steps_planned"].astype(int).astype(str)
        frame.loc[partial, "variant"] += " (" + done + "/" + planned + " steps)"
    return frame


# What normalize() appends to the label of a partial run's rows: ` (72/300 steps)`.
PARTIAL = r" \(\d+/\d+ steps\)$"


def partial_rows(frame: pd.DataFrame) -> pd.Series:
    """Rows of runs evaluated from a checkpoint short of their planned steps (an interrupted
    run); rows that record no steps (written before posx recorded them) are not partial."""
    if "steps_done" not in frame or "steps_planned" not in frame:
        return pd.Series(False, index=frame.index)
    done = pd.to_numeric(frame["steps_done"], errors="coerce")
    planned = pd.to_numeric(frame["steps_planned"], errors="coerce")
    return (done < planned).fillna(False).astype(bool)


def variant_labels(encodings: pd.Series, overrides: pd.Series) -> list[str]:
    """Short variant labels (``rope+yarn×4``, :mod:`posx.config.variant_names`); variants whose
    short labels would coincide keep every override (``rope [encoding.… …]``) so none are
    merged."""
    pairs = list(zip(encodings, overrides, strict=True))
    short = {pair: short_label(*pair) for pair in set(pairs)}
    owners: dict[str, set[tuple[str, str]]] = {}
    for pair, label in short.items():
        owners.setdefault(label, set()).add(pair)
    return [short[p] if len(owners[short[p]]) == 1 else long_label(*p) for p in pairs]


def _split(values: Sequence[str] | None) -> list[str]:
    """Repeated and comma-separated option values as one list."""
    return [v.strip() for text in values or [] for v in text.split(",") if v.strip()]


def select(
    frame: pd.DataFrame,
    tasks: Sequence[str] | None = None,
    encodings: Sequence[str] | None = None,
    modes: Sequence[str] | None = None,
    variants: Sequence[str] | None = None,
    strict: bool = True,
) -> pd.DataFrame:
    """The rows matching every filter; a filter value that matches nothing is an error.

    Args:
        frame: Normalised rows (``load_evals`` or ``load_positions``).
        tasks: Tasks to keep (repeated or comma-separated); None keeps every task.
        encodings: Encodings to keep (the ``encoding`` column), likewise.
        modes: Evaluation modes to keep (``full``, ``sliding``), likewise.
        variants: Eval-time variants to keep: ``base`` (no overrides), ``all``, a short label
            or parts of one (``rope+yarn×4``, ``yarn``, ``yarnx4``), or space-separated
            ``key=value`` tokens the row's overrides must all contain
            (:func:`posx.config.variant_names.matches`).
        strict: Whether a value that matches no row is an error (else it just selects none).
    """
    for option, col, wanted in (
        ("--task", "task", _split(tasks)),
        ("--encoding", "encoding", _split(encodings)),
        ("--mode", "mode", _split(modes)),
    ):
        if not wanted:
            continue
        have = sorted(frame[col].astype(str).unique())
        if col == "encoding":  # `rope+yarnx4+ft@256` is `rope+yarn×4+ft@256`, as --variant takes
            typed, wanted = wanted, [w if w in have else canonical(w) for w in wanted]
            unknown = [t for t, w in zip(typed, wanted, strict=True) if w not in have]
        else:
            unknown = [w for w in wanted if w not in have]
        if unknown and strict:
            raise ConfigError(
                f"no results for {option} {unknown[0]!r}; available: {', '.join(have)}"
            )
        frame = frame[frame[col].astype(str).isin(wanted)]
    wanted = [v.strip() for v in variants or [] if v.strip()]
    if wanted:
        keep = pd.Series(False, index=frame.index)
        idents = frame[["encoding", "overrides", "variant"]].astype(str)
        for value in wanted:
            hit = pd.Series(
                [variant_matches(value, *row) for row in idents.itertuples(index=False)],
                index=frame.index,
                dtype=bool,
            )
            if not hit.any() and strict:
                have = sorted(set(frame["variant"]))
                raise ConfigError(
                    f"no results for --variant {value!r}; available: base, all, "
                    f"{', '.join(have)} (or key=value tokens of the overrides)"
                )
            keep |= hit
        frame = frame[keep]
    return frame


def metric_columns(frame: pd.DataFrame) -> list[str]:
    """Numeric measurement columns a report can show (the standard ones first)."""
    extra = [
        c
        for c in frame.columns
        if c not in METRICS
        and c not in NOT_METRICS
        and not c.startswith(PREFIX)
        and pd.api.types.is_numeric_dtype(frame[c])
        and frame[c].notna().any()
    ]
    return [*METRICS, *sorted(extra)]


def metric_by_task(frame: pd.DataFrame, metric: str) -> dict[str, str]:
    """The metric each task's table shows.

    ``auto`` picks bits per byte for text, exact match for synthetic tasks, else loss, per
    task, so a report over text and copy runs shows each in its natural unit.
    """
    choices = metric_columns(frame)
    if metric != "auto" and metric not in choices:
        raise ConfigError(f"unknown metric {metric!r}; choose from auto, {', '.join(choices)}")
    out = {}
    for task, rows in frame[frame["status"] == "ok"].groupby("task"):
        has = [m for m in choices if m in rows and rows[m].notna().any()]
        if metric == "auto":
            out[task] = next((m for m in AUTO_METRICS if m in has), "loss")
        elif metric in has:
            out[task] = metric
        else:
            raise ConfigError(
                f"metric {metric!r} is not recorded for task {task!r}; it has: {', '.join(has)}"
            )
    for task in frame["task"].unique():  # tasks with no successful row at all
        out.setdefault(task, "loss" if metric == "auto" else metric)
    return out
