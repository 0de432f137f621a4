"""What a sweep directory holds: which jobs finished, failed, are incomplete or never started.

The expected jobs come from the sweep's own ``multirun.yaml`` (the overrides and sweeper params
Hydra recorded), expanded the way Hydra's basic sweeper does; each job directory's
``.hydra/overrides.yaml`` and ``run.json`` say which expected job it is and how it ended.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posx.errors import ConfigError, PosxError, one_line
from posx.saved import SavedRun
from posx.storage.results import load_json_object

Key = frozenset[tuple[str, str]]


@dataclass
class JobStatus:
    """One expected job of a sweep and what its directory shows."""

    number: int
    swept: dict[str, str]
    status: str  # finished | failed | incomplete | damaged | missing
    run_dir: Path | None
    detail: str


def _normalise(overrides: list[str]) -> Key:
    """Overrides as comparable (key, value) pairs (``false`` and ``False`` are equal)."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    return frozenset((o.get_key_element(), repr(o.value())) for o in parsed)


def expected_jobs(sweep_dir: Path) -> list[list[str]]:
    """Every job's override list, in Hydra's job-number order.

    Raises:
        ConfigError: No ``multirun.yaml``.
        PosxError: A ``multirun.yaml`` that is not Hydra's (one line naming it).
    """
    path = sweep_dir / "multirun.yaml"
    if not path.is_file():
        raise ConfigError(f"not a sweep directory (no multirun.yaml): {sweep_dir}")
    try:
        cfg = OmegaConf.load(path)
        overrides = OmegaConf.select(cfg, "hydra.overrides.task")
        params = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
        if not isinstance(overrides, ListConfig) or not isinstance(params, DictConfig | dict):
            raise ValueError("no hydra.overrides.task list")
        overrides = [str(o) for o in overrides]
        given = {o.split("=", 1)[0] for o in overrides}
        overrides += [f"{k}={v}" for k, v in params.items() if k not in given]
        return expand_sweep(overrides)
    except (OSError, ValueError, yaml.YAMLError, OmegaConfBaseException, HydraException) as err:
        raise PosxError(
            f"{path} is damaged ({one_line(err)}); it is not Hydra's record of a sweep"
        ) from err


def expand_sweep(overrides: list[str]) -> list[list[str]]:
    """Every job of a sweep, in the order Hydra's basic sweeper numbers them: the cartesian
    product of each override's values, the first override varying slowest."""
    options = []
    for o in OverridesParser.create().parse_overrides(overrides):
        key = o.get_key_element()
        values = (
            o.sweep_string_iterator() if o.is_sweep_override() else [o.get_value_element_as_str()]
        )
        options.append([f"{key}={v}" for v in values])
    return [list(job) for job in itertools.product(*options)]


def _job_result(run_dir: Path) -> tuple[str, str]:
    run, job = SavedRun(run_dir), run_dir / "job.json"
    if (run_dir / "run.json").is_file():
        info: dict[str, Any] = run.recorded
        if run.info_error is not None:
            return "damaged", f"run.json is damaged ({run.info_error})"
    elif job.is_file():  # a `posx eval -m hf=...` job: its run lies elsewhere
        try:
            info = load_json_object(job)
        except (OSError, ValueError) as err:
            return "damaged", f"run.json is damaged ({one_line(err)})"
    else:
        return "incomplete", "no run.json (stopped before training started)"
    if info.get("status") == "failed":
        return "failed", str(info.get("error", ""))
    if info.get("status") == "finished":  # a pretrained evaluation's job
        return "finished", str(info.get("run", ""))
    if info.get("status") == "trained" and (run_dir / "eval.csv").is_file():
        loss = info.get("final_loss")
        return "finished", f"final loss {loss:.4f}" if isinstance(loss, int | float) else ""
    if info.get("status") == "trained":
        return "incomplete", "trained, not evaluated"
    return "incomplete", "training did not finish"


def sweep_status(sweep_dir: Path) -> list[JobStatus]:
    """Status of every expected job of the sweep in ``sweep_dir``."""
    jobs = expected_jobs(sweep_dir)
    found: dict[Key, Path] = {}
    for overrides_file in sweep_dir.glob("*/.hydra/overrides.yaml"):
        try:
            done = OmegaConf.load(overrides_file)
            found[_normalise([str(x) for x in done])] = overrides_file.parent.parent
        except (OSError, TypeError, yaml.YAMLError, OmegaConfBaseException, HydraException):
            continue  # not a job's record: its job shows as missing
    swept_keys = {k for k, values in _swept(jobs).items() if len(values) > 1}
    out = []
    for number, job in enumerate(jobs):
        pairs = (o.split("=", 1) for o in job)
        swept = {key: value for key, value in pairs if key in swept_keys}
        run_dir = found.get(_normalise(job))
        status, detail = _job_result(run_dir) if run_dir else ("missing", "never started")
        out.append(JobStatus(number, swept, status, run_dir, detail))
    return out


def _swept(jobs: list[list[str]]) -> dict[str, set[str]]:
    values: dict[str, set[str]] = {}
    for job in jobs:
        for o in job:
            key, _, value = o.partition("=")
            values.setdefault(key, set()).add(value)
    return values
