"""Runs told apart by their whole configuration.

Every eval row gets its run's config fingerprint (:mod:`posx.config.fingerprint`, computed from the
run's ``.hydra/config.yaml``, else the ``fingerprint`` column it was written with) and one
``config:<key>`` column per identity key of that config. With those a report can:

- drop duplicate runs (same configuration and seed: the newest is kept, and a warning names
  both), so no seed is counted twice;
- keep rows apart that share a label but not a configuration (their labels name the keys that
  differ) and say under a table which settings its rows differ in beyond what it groups by;
- group (``--by train.steps``) and filter (``--where model.d_model=128``) by any config key;
- say, in the list of configurations, how two configurations that show a row of the same name
  differ (``distinguishing``).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from posx.config.fingerprint import Scalar, fingerprint_of, identity_config
from posx.errors import ConfigError
from posx.saved import SavedRun

PREFIX = "config:"
# Columns that label a table or a row, and the config keys whose values they already show.
EXPLAINED_BY = {
    "encoding": ("encoding.", "positions."),
    "task": ("task.",),
    "model": ("model.",),
    "train_length": ("train.length",),
}
BY_ALIASES = {"train.length": "train_length"}  # a config key that is also an identity column
MAX_LABEL_KEYS = 3
MAX_REMARK_KEYS = 6


@dataclass(frozen=True)
class RunConfig:
    """A run's identity: fingerprint, identity keys, and when it was trained (run.json mtime)."""

    fingerprint: str
    identity: dict[str, Scalar] = field(default_factory=dict)
    saved: bool = False
    mtime: float = 0.0


@functools.lru_cache(maxsize=4096)
def _read(run: str, stamp: int) -> RunConfig:
    path = Path(run)
    cfg = SavedRun(path).recorded_config
    info = path / "run.json"
    mtime = info.stat().st_mtime if info.is_file() else 0.0
    if cfg is None:
        return RunConfig("", {}, False, mtime)
    identity = identity_config(cfg)
    return RunConfig(fingerprint_of(identity), identity, True, mtime)


def read_run_config(run: Path) -> RunConfig:
    """The run's :class:`RunConfig` (cached while its saved config is unchanged)."""
    path = run / ".hydra" / "config.yaml"
    stamp = path.stat().st_mtime_ns if path.is_file() else -1
    return _read(str(run.resolve()), stamp)


def config_column(key: str) -> str:
    """The column that holds config key ``key`` in a report frame: ``config:<key>``."""
    return f"{PREFIX}{key}"


def config_keys(frame: pd.DataFrame) -> list[str]:
    """The config keys with a column in ``frame``, sorted."""
    return sorted(c.removeprefix(PREFIX) for c in frame.columns if c.startswith(PREFIX))


def attach_configs(frame: pd.DataFrame, root: Path) -> pd.DataFrame:
    """Adds ``fingerprint``, ``run_time`` and one ``config:<key>`` column per identity key.

    The fingerprint comes from the run's saved config when it has one (one rule for every
    run, old or new), else from the rows' own ``fingerprint`` column, else it is ``""``.
    """
    frame = frame.copy()
    runs = {d: read_run_config(root / d) for d in frame["run_dir"].unique()}
    stored = frame["fingerprint"] if "fingerprint" in frame else pd.Series("", index=frame.index)
    stored = stored.astype(object).where(stored.notna(), "").astype(str)
    computed = frame["run_dir"].map({d: r.fingerprint for d, r in runs.items()})
    frame["fingerprint"] = computed.where(computed != "", stored)
    frame["run_time"] = frame["run_dir"].map({d: r.mtime for d, r in runs.items()})
    keys = sorted({k for r in runs.values() for k in r.identity})
    columns = {
        config_column(k): frame["run_dir"].map({d: r.identity.get(k) for d, r in runs.items()})
        for k in keys
    }
    return pd.concat([frame, pd.DataFrame(columns, index=frame.index, dtype=object)], axis=1)


def drop_duplicate_runs(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Keeps one run per (configuration, seed): the newest (by ``run.json`` time).

    Returns:
        The rows of the kept runs, and one warning per dropped run naming both directories.
    """
    ident = ["fingerprint", "seed", "encoding", "task", "model", "train_length"]
    ident = [c for c in ident if c in frame]
    if "run_dir" not in frame or not ident:
        return frame, []
    if "run_time" not in frame:
        frame = frame.assign(run_time=0.0)
    runs = frame.drop_duplicates("run_dir")[["run_dir", "run_time", *ident]]
    runs = runs.sort_values(["run_time", "run_dir"])
    warnings, dropped = [], set()
    for _, same in runs.groupby(ident, dropna=False, sort=True):
        if len(same) < 2:
            continue
        keep = same["run_dir"].iloc[-1]
        fp = same["fingerprint"].iloc[0] if "fingerprint" in same else ""
        what = (
            f"the same configuration ({fp})"
            if fp
            else "no saved config, so their configurations cannot be compared"
        )
        for old in same["run_dir"].iloc[:-1]:
            dropped.add(old)
            warnings.append(
                f"duplicate runs: {old} and {keep} have {what} and seed "
                f"{same['seed'].iloc[0]}; showing only the newer, {keep}"
            )
    return frame[~frame["run_dir"].isin(dropped)], warnings


# --- values of a key: the run's config, with the row's eval-time overrides applied ---------------


def _parse_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _override_values(overrides: str) -> dict[str, Any]:
    """``key -> value`` of an ``overrides`` cell (``~key`` deletes: None)."""
    out: dict[str, Any] = {}
    for token in overrides.split():
        if token.startswith("~"):
            out[token.lstrip("~").split("=", 1)[0]] = None
        elif "=" in token:
            key, value = token.lstrip("+").split("=", 1)
            out[key] = _parse_value(value)
    return out


def effective(frame: pd.DataFrame, key: str) -> pd.Series:
    """The value of config ``key`` for each row: the run's, or the row's eval-time override."""
    col = config_column(key)
    values = frame[col] if col in frame else pd.Series(None, index=frame.index, dtype=object)
    values = values.astype(object).copy()
    if "overrides" in frame:
        for text in frame["overrides"].unique():
            changes = _override_values(str(text))
            if key in changes:
                values[frame["overrides"] == text] = changes[key]
    return values


def show(value: Any) -> str:
    """A config value as a report prints it (``—`` where a run does not have the key)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _brief(key: str, value: Any) -> str:
    """A value for a narrow cell: a ``_target_`` by its class name alone."""
    text = show(value)
    return text.rsplit(".", 1)[-1] if key.endswith("_target_") else text


def distinguishing(
    identities: Mapping[str, Mapping[str, Scalar]], labels: Mapping[str, Sequence[str]]
) -> dict[str, str]:
    """Per configuration (fingerprint), the settings that tell it apart from the others that
    show a row of the same name (``rope`` trained at two lengths: ``train.length=8``); ``""``
    for one whose rows no other configuration shares, or whose config is not saved.

    Args:
        identities: Fingerprint -> the identity keys of its saved config (may be empty).
        labels: Fingerprint -> the row labels its runs show.
    """
    out = {}
    for fp, ident in identities.items():
        names = set(labels.get(fp, ()))
        peers = [
            other
            for q, other in identities.items()
            if q != fp and other and names & set(labels.get(q, ()))
        ]
        if not ident or not peers:
            out[fp] = ""
            continue
        group = [ident, *peers]
        keys = sorted(k for k in set().union(*group) if len({show(g.get(k)) for g in group}) > 1)
        shown = [f"{k}={_brief(k, ident.get(k))}" for k in keys[:MAX_LABEL_KEYS]]
        more = len(keys) - MAX_LABEL_KEYS
        out[fp] = " · ".join(shown) + (f" and {more} more" if more > 0 else "")
    return out


def _same(value: Any, wanted: str) -> bool:
    """Whether a config value equals the text a user typed (``128``, ``3e-3``, ``true``)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return wanted.strip().lower() in ("null", "none", "~", "—")
    if isinstance(value, bool):
        return wanted.strip().lower() == str(value).lower()
    if isinstance(value, int | float):
        try:
            return math.isclose(float(value), float(wanted), rel_tol=1e-9, abs_tol=0.0)
        except ValueError:
            return False
    text = str(value)
    if text.startswith("["):  # a list, stored as JSON text
        parsed = _parse_value(wanted)
        return isinstance(parsed, list) and json.dumps(parsed, sort_keys=True) == text
    return text == wanted


def parse_where(values: Sequence[str] | None, frame: pd.DataFrame) -> list[tuple[str, str]]:
    """``key=value`` filters; a key must be a config key or a column of the eval rows."""
    known = set(config_keys(frame)) | {c for c in frame.columns if not c.startswith(PREFIX)}
    out = []
    for text in values or []:
        key, sep, value = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--where needs KEY=VALUE, e.g. model.d_model=128; got {text!r}")
        if key not in known:
            sample = ", ".join(config_keys(frame)[:8]) or "none saved"
            raise ConfigError(
                f"unknown --where key {key!r}; use a config key (e.g. {sample}) "
                "or an eval.csv column (task, encoding, seed, mode, eval_length)"
            )
        out.append((key, value.strip()))
    return out


def where(frame: pd.DataFrame, filters: Iterable[tuple[str, str]]) -> pd.DataFrame:
    """Rows whose value of every filter key equals its value; a value no row has is an error."""
    for key, wanted in filters:
        values = effective(frame, key) if config_column(key) in frame else frame[key]
        hit = values.map(lambda v, w=wanted: _same(v, w)).astype(bool)
        if not hit.any():
            have = sorted({show(v) for v in values}, key=str)
            raise ConfigError(
                f"no results for --where {key}={wanted}; it has: {', '.join(have[:12])}"
            )
        frame = frame[hit]
    return frame
