"""Making a :class:`Report`: every result below a root, loaded, filtered, labelled, summarised
and ranked once, whatever the output format (see :mod:`posx.report.output`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from posx.errors import ConfigError
from posx.report.chance import LEARNED, check_thresholds, unknown_chance
from posx.report.configs import drop_duplicate_runs, parse_where
from posx.report.configs import where as where_rows
from posx.report.data import load_evals, load_positions, load_training, metric_by_task, select
from posx.report.labels import label_rows, parse_by
from posx.report.plots.data import position_values, run_labels
from posx.report.plots.selection import Plots
from posx.report.rank import RANK_LENGTHS, rank_table
from posx.report.ruler import ruler_sections
from posx.report.tables import Section, WideTable, pivot, summarize
from posx.ruler.scoring import THRESHOLD

# Runs named in the warning about runs without a saved config; the count says how many more.
UNSAVED_NAMED = 3


@dataclass
class Report:
    """Everything one ``posx report`` call shows, computed once for every format."""

    summary: pd.DataFrame
    tables: list[WideTable]
    rank: pd.DataFrame | None
    positions: pd.DataFrame | None = None
    training: pd.DataFrame | None = None
    by: list[str] = field(default_factory=list)
    rank_lengths: str = "ood"
    learned: float = LEARNED
    digits: int = 3
    ratio: bool = True
    figures: Plots | None = None  # drawn on first use, shared by --plot and the HTML page
    warnings: list[str] = field(default_factory=list)  # e.g. duplicate runs; print on stderr
    root: Path | None = None
    rows: pd.DataFrame | None = None  # the labelled eval rows shown (for the provenance)
    sections: list[Section] = field(default_factory=list)  # e.g. the claims' verdicts


@dataclass(frozen=True)
class Filters:
    """The ``--task``/``--encoding``/``--mode``/``--variant`` filters (see ``data.select``)."""

    tasks: Sequence[str] | None = None
    encodings: Sequence[str] | None = None
    modes: Sequence[str] | None = None
    variants: Sequence[str] | None = None

    def apply(self, frame: pd.DataFrame, strict: bool = True) -> pd.DataFrame:
        """The rows of ``frame`` that pass every filter (``strict``: a value matching nothing
        is an error)."""
        return select(frame, self.tasks, self.encodings, self.modes, self.variants, strict=strict)


def make_report(
    root: Path,
    *,
    metric: str = "auto",
    tasks: Sequence[str] | None = None,
    encodings: Sequence[str] | None = None,
    modes: Sequence[str] | None = None,
    variants: Sequence[str] | None = None,
    by: Sequence[str] | None = None,
    rank: bool | None = None,
    rank_lengths: str = "ood",
    digits: int = 3,
    ratio: bool = True,
    where: Sequence[str] | None = None,
    learned: float = LEARNED,
    learned_loss: float | None = None,
    threshold: float = THRESHOLD,
) -> Report:
    """Loads, filters and summarises every result below ``root``.

    Runs are grouped by their whole configuration: a duplicate run (same config fingerprint and
    seed) is dropped with a warning, keeping the newest; rows that share a label but not a
    configuration are kept apart, and each table notes the settings its rows differ in.

    Args:
        root: Results root; every run directory below it counts.
        metric: ``auto`` or a metric column (see ``metric_by_task``).
        tasks: Tasks to keep (repeated or comma-separated); None = all (see ``data.select``).
        encodings: Encodings to keep, likewise.
        modes: Evaluation modes to keep (``full``, ``sliding``), likewise.
        variants: Eval-time variants to keep (``base``, ``all``, ``rope+yarn×4``, ...);
            None = all.
        by: Compared inside one table: model, train_length, task, mode, seed, or any config
            key (``train.steps``).
        rank: Include the mean-reciprocal-rank table; None = when 2+ tasks are shown.
        rank_lengths: ``ood`` (eval lengths past training) or ``all``.
        digits: Decimals in the tables.
        ratio: Show each cell's metric relative to the same run at its training length.
        where: ``KEY=VALUE`` filters on any config key or eval column
            (``model.d_model=128``); all must hold.
        learned: A row whose accuracy-like metric at its training length (above chance) is
            below this is marked ``not learned`` and ranks last in that task's ranking
            (:mod:`posx.report.rank`); 0 = off.
        learned_loss: The same for lower-is-better metrics (loss, bpb): marked when above
            this; None = off.
        threshold: The RULER average the effective length needs (percent).
    """
    check_options(rank_lengths, digits, learned, learned_loss)
    filters = Filters(tasks, encodings, modes, variants)
    frame, by_cols, warnings = load_rows(root, filters, by, where)
    frame, remarks = label_rows(frame, by_cols)
    summary = summarize(frame, metric, by_cols, learned, learned_loss)
    tables = pivot(summary, by_cols, remarks)
    show_rank = rank if rank is not None else frame["task"].nunique() > 1
    return Report(  # in this order: damaged per-run files are warned about before the ranking
        summary=summary,
        tables=tables,
        positions=shown_positions(root, frame, filters, metric),
        training=shown_training(root, frame),
        rank=rank_table(tables, rank_lengths) if show_rank else None,
        by=by_cols,
        rank_lengths=rank_lengths,
        learned=learned,
        digits=digits,
        ratio=ratio,
        warnings=warnings,
        root=root,
        rows=frame,
        sections=ruler_sections(frame, threshold),
    )


def check_options(
    rank_lengths: str, digits: int, learned: float, learned_loss: float | None
) -> None:
    """Refuses options that are wrong whatever the results, before any file is read.

    Raises:
        ConfigError: A threshold out of range, an unknown ``rank_lengths`` or ``digits`` not
            in 0-10.
    """
    check_thresholds(learned, learned_loss)
    if rank_lengths not in RANK_LENGTHS:
        raise ConfigError(f"unknown --rank-lengths {rank_lengths!r}; choose from ood, all")
    if not 0 <= digits <= 10:
        raise ConfigError(f"--digits must be between 0 and 10, got {digits}")


def load_rows(
    root: Path, filters: Filters, by: Sequence[str] | None, where: Sequence[str] | None
) -> tuple[pd.DataFrame, list[str], list[str]]:
    """The eval rows the report shows, one run per config and seed.

    ``--by`` and ``--where`` are parsed against every row under ``root``, before the filters.

    Returns:
        The rows, the ``--by`` columns and the warnings for stderr (duplicate runs dropped,
        runs without a saved config, rows from before the chance level was recorded).

    Raises:
        ConfigError: A bad ``--by`` or ``--where``, or no row passes the filters.
    """
    frame = load_evals(root)
    by_cols = parse_by(by, frame)
    frame = filter_rows(frame, filters, where)
    if frame.empty:
        raise ConfigError(f"no eval rows under {root} match the filters")
    frame, warnings = drop_duplicate_runs(frame)
    return frame, by_cols, warnings + config_warnings(frame)


def filter_rows(frame: pd.DataFrame, filters: Filters, where: Sequence[str] | None) -> pd.DataFrame:
    """The rows that pass ``--task``/``--encoding``/``--mode``/``--variant`` and every
    ``--where KEY=VALUE`` (parsed against all of ``frame``, before the filters): what ``posx
    report`` shows and ``posx check`` judges.

    Raises:
        ConfigError: A bad ``--where``, or a filter value that matches no row.
    """
    conditions = parse_where(where, frame)
    return where_rows(filters.apply(frame), conditions)


def config_warnings(frame: pd.DataFrame) -> list[str]:
    """Warnings about what the rows cannot tell: runs without a saved config (their configs
    cannot be compared) and rows without a recorded chance level."""
    warnings = []
    unsaved = sorted(set(frame.loc[frame["fingerprint"] == "", "run_dir"]))
    if unsaved:
        more = " ..." if len(unsaved) > UNSAVED_NAMED else ""
        warnings.append(
            f"{len(unsaved)} run(s) have no saved config (.hydra/config.yaml), so runs that "
            f"differ in config cannot be told apart: {', '.join(unsaved[:UNSAVED_NAMED])}{more}"
        )
    old = unknown_chance(frame)
    return warnings + ([old] if old else [])


def shown_positions(
    root: Path, frame: pd.DataFrame, filters: Filters, metric: str
) -> pd.DataFrame | None:
    """The per-position rows of the runs in ``frame`` that evaluated without error, as the
    per-position plots take them; None when no run recorded any."""
    positions = load_positions(root)
    if positions is None:
        return None
    # Not strict: the eval rows have checked every filter value already, and a run need not
    # have per-position rows.
    positions = filters.apply(positions, strict=False)
    positions = positions[positions["run_dir"].isin(set(frame["run_dir"]))]
    if "status" in positions:
        positions = positions[positions["status"] == "ok"]
    return position_values(positions, frame, metric_by_task(frame, metric))


def shown_training(root: Path, frame: pd.DataFrame) -> pd.DataFrame | None:
    """The training curves of the runs in ``frame``, each labelled as its table row; None when
    no run recorded one."""
    training = load_training(root)
    if training is None:
        return None
    training = training[training["run_dir"].isin(set(frame["run_dir"]))]
    return training.assign(label=training["run_dir"].map(run_labels(frame)))
