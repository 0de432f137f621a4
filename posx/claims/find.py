"""Which preset each run under a root belongs to, and the claims files of those presets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from posx.claims.check import EMPTY, check_claims
from posx.claims.files import load_claims
from posx.claims.language import ID, ClaimsFile
from posx.claims.lineage import attach_lineage
from posx.claims.preset import preset_tasks
from posx.claims.verdict import LEVEL, MIN_SEEDS, Verdict
from posx.config.paths import CONFIG_DIR, options, user_config_dirs
from posx.errors import ConfigError
from posx.report.build import Filters, filter_rows
from posx.report.configs import drop_duplicate_runs
from posx.report.data import PARTIAL, load_evals, partial_rows
from posx.saved import SavedRun

GROUP = "claims"  # configs/claims/NAME.yaml holds the claims of configs/experiment/NAME.yaml


def claims_files(dirs: Sequence[Path] | None = None) -> dict[str, Path]:
    """Preset name -> claims file: posx's own, then those in the user's config dirs."""
    return options(GROUP, config_dirs(dirs))


def config_dirs(dirs: Sequence[Path] | None) -> Sequence[Path]:
    """The user's config dirs: ``dirs`` where given, else the environment's."""
    return user_config_dirs() if dirs is None else dirs


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
    *,
    tasks: Sequence[str] | None = None,
    where: Sequence[str] | None = None,
    tuning: bool = False,
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
        tasks: Judge only these tasks' runs (``posx report --task``); without it (nor a
            ``task=`` in ``where``), each preset's claims see the tasks its config trains
            (:mod:`posx.claims.preset`) and the tasks its claims name, and runs of other tasks
            that record the preset are left aside with a note.
        where: ``KEY=VALUE`` filters on any config key or eval column (``posx report
            --where``).
        tuning: Judge the runs of a preset's ``tuning_seeds`` too (the seeds that chose its
            settings; left out, with a note, by default).

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
    frame = filter_rows(load_evals(root), Filters(tasks=tasks), where)
    frame = attach_lineage(frame, root)
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
    chose_task = bool(tasks) or any(w.partition("=")[0].strip() == "task" for w in where or [])
    for name in names:
        claims: ClaimsFile = load_claims(files[name], name)
        rows = pd.DataFrame(chosen[name])
        empty = EMPTY
        if not chose_task:
            trains = preset_tasks(name, config_dirs(dirs))
            rows, empty = _own_tasks(rows, claims, trains, notes)
        if not rows.empty:
            rows, empty = _judging_seeds(rows, claims, tuning, notes)
        # a preset's own duplicates only: the same config may be another preset's run too
        rows, _ = drop_duplicate_runs(rows)
        notes += _task_note(rows, claims)
        verdicts += check_claims(rows, claims, min_seeds, level, empty)
    return Checked(verdicts, notes)


def _own_tasks(
    rows: pd.DataFrame, claims: ClaimsFile, trains: list[str], notes: list[str]
) -> tuple[pd.DataFrame, str]:
    """A preset's rows of the tasks its config trains (``trains``) or its claims name (``on
    TASK``); the runs of other tasks that record the preset (``posx train
    experiment=context_extension task=copy``) are left aside with a note naming ``--task``.
    Every row where the preset's config names no task. The second value is the claims' reason
    where no row is left."""
    named = {c.statement.task for c in claims.claims if c.statement.task}
    keep = set(trains) | named
    if not trains or rows.empty:
        return rows, EMPTY
    other = ~rows["task"].astype(str).isin(keep)
    if not other.any():
        return rows, EMPTY
    names = sorted(set(rows.loc[other, "task"].astype(str)))
    notes.append(
        f"left out {rows.loc[other, 'run_dir'].nunique()} run(s) of {claims.experiment} "
        f"on task(s) {', '.join(names)}: the preset trains {', '.join(trains)}; "
        f"--task {names[0]} checks its claims on them instead"
    )
    empty = (
        f"no runs of the task(s) the preset trains ({', '.join(trains)}), only of "
        f"{', '.join(names)}: --task {names[0]} checks its claims on those"
    )
    return rows[~other], empty


def _judging_seeds(
    rows: pd.DataFrame, claims: ClaimsFile, tuning: bool, notes: list[str]
) -> tuple[pd.DataFrame, str]:
    """A preset's rows without those of its ``tuning_seeds`` (the seeds that chose its
    settings: a claim fitted to the seeds that judge it says nothing), unless ``tuning``; a
    note says what was left out, and the second value is the claims' reason where nothing is
    left to judge."""
    empty = EMPTY
    seeds = ", ".join(map(str, claims.tuning_seeds))
    if not claims.tuning_seeds or rows.empty:
        return rows, empty
    mine = rows["seed"].isin(claims.tuning_seeds)
    if tuning:
        if mine.any():
            notes.append(
                f"{claims.experiment}: judged on its tuning seeds {seeds} too (--tuning-seeds): "
                "they chose its settings, so its claims were fitted to them"
            )
        return rows, empty
    if mine.any():
        notes.append(
            f"{claims.experiment}: left out {rows.loc[mine, 'run_dir'].nunique()} run(s) of "
            f"seeds {seeds}, the seeds that chose its settings (tuning_seeds in "
            f"{claims.path.name}): its claims are judged on other seeds; --tuning-seeds "
            "judges them too"
        )
    if mine.all():
        empty = (
            f"only runs of the tuning seeds {seeds}, which chose the preset's settings: train "
            f"others (seed={_fresh(claims.tuning_seeds)}), or pass --tuning-seeds"
        )
    return rows[~mine], empty


def _fresh(tuning: Sequence[int]) -> str:
    """Three seeds that are not tuning seeds, for the advice (``3,4,5`` after ``0,1,2``)."""
    start = max(tuning) + 1
    return ",".join(str(start + i) for i in range(3))


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
    note = (
        f"{claims.experiment}'s runs are of {len(tasks)} tasks ({', '.join(tasks)}) and its "
        f"claim(s) {', '.join(vague)} name no task, so they cannot pick one: pass --task "
        f"{tasks[0]} (or --where KEY=VALUE) to judge one task's runs"
    )
    if not claims.path.resolve().is_relative_to(CONFIG_DIR.resolve()):  # the user's own file
        note += f", or add 'on TASK' to their statements in {claims.path}"
    return [note]
