"""Where a report's numbers came from: posx version, date, git commit, and every distinct
configuration with its runs (so a reader can open the exact config behind a row)."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from posx.version import __version__

SOURCE = Path(__file__).resolve().parent.parent  # the posx package directory


@dataclass
class ConfigEntry:
    """One distinct configuration (fingerprint) and the runs trained with it."""

    fingerprint: str  # "" when the runs saved no config
    labels: list[str]
    runs: list[tuple[str, int, Path]]  # (run dir relative to the root, seed, config.yaml)


@dataclass
class Provenance:
    """The report's header: what made it, when, from which results."""

    version: str
    generated: str
    commit: str | None
    root: Path
    configs: list[ConfigEntry] = field(default_factory=list)


def git_commit(path: Path = SOURCE) -> str | None:
    """``abc1234`` (``-dirty`` with uncommitted changes) of the git tree holding ``path``;
    None outside a git tree or without git."""
    try:
        head = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--short=10", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def config_file(run: Path) -> Path:
    """The file that says how a run was made: its saved config, or, for a run that has none
    (a pretrained model's, ``posx eval hf:...``), its ``run.json``."""
    saved = run / ".hydra" / "config.yaml"
    return run / "run.json" if not saved.is_file() and (run / "run.json").is_file() else saved


def provenance(root: Path, frame: pd.DataFrame) -> Provenance:
    """The provenance of a report over ``frame`` (its eval rows, labelled) below ``root``."""
    configs = []
    runs = frame.drop_duplicates("run_dir")
    for fp, part in runs.groupby(runs["fingerprint"].fillna(""), sort=True):
        labels = sorted(set(frame.loc[frame["fingerprint"].fillna("") == fp, "label"]))
        listed = [
            (str(r), int(s), config_file(root / str(r)))
            for r, s in sorted(zip(part["run_dir"], part["seed"], strict=True), key=lambda x: x[1])
        ]
        configs.append(ConfigEntry(str(fp), labels, listed))
    return Provenance(
        version=__version__,
        generated=time.strftime("%Y-%m-%d %H:%M %Z"),
        commit=git_commit(),
        root=root,
        configs=configs,
    )


def link(target: Path, base: Path | None) -> str:
    """``target`` as a link from a page in directory ``base`` (relative when possible)."""
    if base is None:
        return target.resolve().as_uri()
    try:
        return Path(os.path.relpath(target.resolve(), base.resolve())).as_posix()
    except ValueError:  # another drive (Windows)
        return target.resolve().as_uri()
