"""Which preset each run under a root belongs to, and the claims files of those presets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from posx.claims.check import check_claims
from posx.claims.files import load_claims
from posx.claims.language import ID, ClaimsFile
from posx.claims.verdict import LEVEL, MIN_SEEDS, Verdict
from posx.config.fingerprint import saved_config
from posx.config.paths import options, user_config_dirs
from posx.errors import ConfigError, PosxError
from posx.report.configs import drop_duplicate_runs
from posx.report.data import load_evals
from posx.storage.results import run_info

GROUP = "claims"  # configs/claims/NAME.yaml holds the claims of configs/experiment/NAME.yaml


def claims_files(dirs: Sequence[Path] | None = None) -> dict[str, Path]:
    """Preset name -> claims file: posx's own, then those in the user's config dirs."""
    return options(GROUP, user_config_dirs() if dirs is None else dirs)


def run_experiment(run: Path) -> str:
    """The preset a run records: ``run.json``'s ``experiment``, else its saved config's
    ``experiment_name``; ``""`` when neither names one (or the name is not a plain name)."""
    try:
        name = str(run_info(run).get("experiment") or "")
    except PosxError:
        name = ""
    if not name:
        try:
            cfg = saved_config(run)
        except Exception:  # noqa: BLE001 - a damaged config only means "no preset recorded"
            cfg = None
        name = str(cfg.get("experiment_name") or "") if cfg is not None else ""
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
) -> Checked:
    """Checks the claims of every preset whose runs are under ``root``.

    Args:
        root: A results root (every run below it counts).
        dirs: The user's config dirs (their ``claims/`` files count too).
        experiment: Check only this preset's claims, on the runs that record it and on runs
            that record none.
        min_seeds: Seeds each term needs for a verdict.
        level: The seed agreement a verdict needs.

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
    frame = load_evals(root)
    runs = {d: run_experiment(root / d) for d in frame["run_dir"].unique()}
    frame = frame.assign(experiment=frame["run_dir"].map(runs))
    frame = frame[frame["mode"] == "full"]
    notes = []
    if experiment is not None:
        frame = frame[frame["experiment"].isin([experiment, ""])]
        names = [experiment]
    else:
        unnamed = sum(1 for e in runs.values() if not e)
        if unnamed:
            notes.append(
                f"{unnamed} run(s) record no experiment; check them with --experiment NAME"
            )
        recorded = sorted({e for e in runs.values() if e})
        notes += [f"experiment {e!r} has no claims file" for e in recorded if e not in files]
        names = [e for e in recorded if e in files]
    if not names:
        raise ConfigError(
            f"no run under {root} records an experiment with claims "
            f"({', '.join(files) or 'none'}); train with experiment=NAME, or name one with "
            "--experiment NAME"
        )
    verdicts: list[Verdict] = []
    for name in names:
        claims: ClaimsFile = load_claims(files[name], name)
        rows = frame[frame["experiment"] == name] if experiment is None else frame
        # a preset's own duplicates only: the same config may be another preset's run too
        rows, _ = drop_duplicate_runs(pd.DataFrame(rows))
        verdicts += check_claims(rows, claims, min_seeds, level)
    return Checked(verdicts, notes)
