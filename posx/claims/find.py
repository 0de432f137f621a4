"""Which preset each run under a root belongs to, and the claims files of those presets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from posx.claims.check import check_claims
from posx.claims.files import load_claims
from posx.claims.language import ID, ClaimsFile
from posx.claims.lineage import attach_lineage
from posx.claims.verdict import LEVEL, MIN_SEEDS, Verdict
from posx.config.paths import options, user_config_dirs
from posx.errors import ConfigError
from posx.report.configs import drop_duplicate_runs
from posx.report.data import PARTIAL, load_evals, partial_rows
from posx.saved import SavedRun

GROUP = "claims"  # configs/claims/NAME.yaml holds the claims of configs/experiment/NAME.yaml


def claims_files(dirs: Sequence[Path] | None = None) -> dict[str, Path]:
    """Preset name -> claims file: posx's own, then those in the user's config dirs."""
    return options(GROUP, user_config_dirs() if dirs is None else dirs)


def run_experiment(run: Path) -> str:
    """The preset a run records: ``run.json``'s ``experiment``, else its saved config's
    ``experiment_name``; ``""`` when neither names one (or the name is not a plain name)."""
    name = SavedRun(run).experiment
    return name if ID.fullmatch(name) else ""


@dataclass
class Checked:
    """The verdicts of every preset found under a root, and what was left aside."""

    verdicts: list[Verdict]
    notes: list[str] = field(default_factory=list)


def check_root(
    root: Path,
    dirs: Sequence[Path] | None = None,
    experiment: str | None = None,
    min_seeds: int = MIN_SEEDS,
    level: float = LEVEL,
    partial: bool = False,
) -> Checked:
    """Checks the claims of every preset whose runs are under ``root``.

    Args:
        root: A results root (every run below it counts).
        dirs: The user's config dirs (their ``claims/`` files count too).
        experiment: Check only this preset's claims, on the runs that record it (on the runs
            that record none only where no run records it).
        min_seeds: Seeds each term needs for a verdict.
        level: The seed agreement a verdict needs.
        partial: Judge rows of runs evaluated before their last step too (left out, with a
            note, by default: a claim is about trained models).

    Raises:
        ConfigError: An unknown preset, bad options, or no run of a preset with claims.
        ClaimError: A claims file that does not fit the language.
    """
    if min_seeds < 1 or not 0.5 < level <= 1:
        raise ConfigError(
            f"--min-seeds must be >= 1 and --agreement in (0.5, 1], got {min_seeds}, {level}"
        )
    files = claims_files(dirs)
    if experiment is not None and experiment not in files:
        raise ConfigError(
            f"no claims for experiment {experiment!r}; presets with claims: {', '.join(files)}"
        )
    frame = attach_lineage(load_evals(root), root)
    runs = {d: run_experiment(root / d) for d in frame["run_dir"].unique()}
    frame = frame.assign(experiment=frame["run_dir"].map(runs))
    # claims read full-mode rows, and RULER's (mode generate: a prompt is always read whole)
    frame = frame[frame["mode"].isin(["full", "generate"])]
    notes: list[str] = []
    short = partial_rows(frame)
    if short.any() and not partial:
        names = ", ".join(sorted(set(frame.loc[short, "variant"])))
        notes.append(
            f"left out {frame.loc[short, 'run_dir'].nunique()} run(s) evaluated before their last "
            f"step ({names}); pass --partial to judge them too"
        )
        frame = frame[~short]
    elif short.any():  # asked for: judged under their encoding's name, as finished runs are
        frame = frame.assign(variant=frame["variant"].str.replace(PARTIAL, "", regex=True))
    if experiment is not None:
        names = [experiment]
        chosen = {experiment: _named_rows(frame, experiment, root, notes)}
    else:
        names = _presets(runs, files, notes)
        chosen = {name: frame[frame["experiment"] == name] for name in names}
    if not names:
        raise ConfigError(
            f"no run under {root} records an experiment with claims "
            f"({', '.join(files) or 'none'}); train with experiment=NAME, or name one with "
            "--experiment NAME"
        )
    verdicts: list[Verdict] = []
    for name in names:
        claims: ClaimsFile = load_claims(files[name], name)
        # a preset's own duplicates only: the same config may be another preset's run too
        rows, _ = drop_duplicate_runs(pd.DataFrame(chosen[name]))
        notes += _task_note(rows, claims)
        verdicts += check_claims(rows, claims, min_seeds, level)
    return Checked(verdicts, notes)


def _presets(runs: dict[str, str], files: dict[str, Path], notes: list[str]) -> list[str]:
    """The presets with claims that the runs record; what is left aside goes into ``notes``."""
    unnamed = sum(1 for e in runs.values() if not e)
    notes += _unnamed_note(unnamed)
    recorded = sorted({e for e in runs.values() if e})
    notes += [f"experiment {e!r} has no claims file" for e in recorded if e not in files]
    return [e for e in recorded if e in files]


def _unnamed_note(count: int) -> list[str]:
    if not count:
        return []
    return [
        f"{count} run(s) record no experiment and are not checked (--experiment NAME checks "
        "them under a root where no run records NAME)"
    ]


def _named_rows(frame: pd.DataFrame, name: str, root: Path, notes: list[str]) -> pd.DataFrame:
    """``--experiment NAME``: the runs that record NAME, never other runs beside them (another
    preset's, or a quick ``posx train``'s, would be other configurations and tasks, and leave
    every claim inconclusive); only under a root where no run records it, the runs that record
    no experiment (runs of a preset trained before posx recorded it).

    Raises:
        ConfigError: No run records NAME, and none records no experiment.
    """
    own = frame[frame["experiment"] == name]
    unnamed = frame[frame["experiment"] == ""]
    if not own.empty:
        notes += _unnamed_note(unnamed["run_dir"].nunique())
        return own
    if unnamed.empty:
        recorded = sorted(set(frame["experiment"]))
        raise ConfigError(
            f"no run under {root} records experiment {name!r} (the runs there record: "
            f"{', '.join(recorded)}); train it with `posx train -m experiment={name}`"
        )
    count = unnamed["run_dir"].nunique()
    notes.append(
        f"no run under {root} records experiment {name!r}: checking the {count} run(s) that "
        "record no experiment"
    )
    return unnamed


def _task_note(rows: pd.DataFrame, claims: ClaimsFile) -> list[str]:
    """Why a claim says "name one with 'on TASK'": the preset's runs are of several tasks and
    the claim's statement names none, so it cannot tell which task's runs to compare."""
    tasks = sorted(set(rows["task"].astype(str))) if "task" in rows else []
    vague = [c.id for c in claims.claims if not c.statement.mrr and c.statement.task is None]
    if len(tasks) < 2 or not vague:
        return []
    return [
        f"{claims.experiment}'s runs are of {len(tasks)} tasks ({', '.join(tasks)}) and its "
        f"claim(s) {', '.join(vague)} name no task, so they cannot pick one: add 'on TASK' to "
        f"their statements in {claims.path} (e.g. '... at 4x on {tasks[0]}')"
    ]
