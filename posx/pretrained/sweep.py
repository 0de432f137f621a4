"""``posx eval -m hf=NAME_A,NAME_B ...``: pretrained evaluations as a Hydra sweep.

The sweep composes ``configs/pretrained.yaml`` (one key per ``posx eval hf:...`` option and
setting: ``hf``, ``eval.lengths``, ``eval.variants``, ``dtype``, ``logger`` ...), so any of its
keys can be swept (``hf=A,B``, ``eval.lengths=[2048],[4096]``) and any of posx's launchers runs
the jobs (``hydra/launcher=local_parallel``, ``hydra/launcher=slurm``), as for ``posx train -m``.
Each job evaluates one model into its ordinary run directory, ``<root>/pretrained/...``, and
leaves ``job.json`` (finished or failed, and why) in its Hydra job directory under
``<root>/sweeps/<invocation>/``; a failed job is reported and the sweep goes on, and the command
exits non-zero at the end when any failed.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from posx.config.compose import new_invocation
from posx.config.hints import one_line
from posx.config.paths import CONFIG_DIR, searchpath_override, user_config_dirs
from posx.config.validate import parse_buckets, positive_lengths
from posx.errors import ConfigError, PosxError
from posx.pretrained.evaluate import Settings
from posx.pretrained.request import DEFAULTS, Request, check_values, parse_suites
from posx.pretrained.run import evaluate_pretrained, progress_line
from posx.pretrained.scaling import parse_variant
from posx.pretrained.track import CONFIG_NAME, compose_pretrained
from posx.runs.evaluation import failures
from posx.runs.sizes import parse_size
from posx.runs.sweeps import expand_sweep
from posx.storage.results import load_json_object, write_json
from posx.tracking import selected

log = logging.getLogger(__name__)
JOB_FILE = "job.json"


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


def request_from_config(cfg: DictConfig, sweep_dir: Path | None = None) -> Request:
    """One job's composed ``configs/pretrained.yaml`` as what ``posx eval hf:...`` is asked.

    Raises:
        ConfigError: No model (``hf=``), or a setting of the wrong kind.
    """
    if OmegaConf.is_missing(cfg, "hf") or not cfg.hf:
        raise ConfigError("name the models to evaluate: posx eval -m hf=NAME_A,NAME_B ...")
    values = check_values({key: _plain(OmegaConf.select(cfg, key)) for key in DEFAULTS})
    e = cfg.eval
    if e.mode not in ("full", "sliding"):
        raise ConfigError(f"unknown eval.mode {e.mode!r}; choose from full, sliding")
    settings = Settings(
        lengths=positive_lengths(list(e.lengths), "eval.lengths") if e.lengths else [],
        mode=str(e.mode),
        window=e.window,
        stride=e.stride,
        tokens=values["eval.tokens"],
        batch_tokens=values["eval.batch_tokens"],
        buckets=parse_buckets(e.buckets),
        variants=[parse_variant(str(v)) for v in e.variants or ["none"]],
    )
    return Request(
        f"hf:{cfg.hf}", settings, values, bool(e.passkey), Path(str(cfg.root)), str(cfg.device),
        str(cfg.dtype), cfg.device_map, [str(t) for t in cfg.trust_remote_code or []],
        cfg.revision, bool(cfg.allow_download), parse_size(cfg.max_memory, "max_memory"),
        selected(cfg), sweep_dir, suites=parse_suites(str(e.get("suite") or "text")),
    )  # fmt: skip


def _job(cfg: DictConfig) -> None:
    """One Hydra job: one model evaluated; a failure is recorded in ``job.json`` and logged,
    and the next job runs."""
    hc = HydraConfig.get()
    job_dir = Path(hc.runtime.output_dir)
    word = f"hf:{cfg.get('hf')}"
    record: dict[str, Any] = {"model": word, "overrides": list(hc.overrides.task)}
    try:
        request = request_from_config(cfg, Path(hc.sweep.dir))

        def line(task: str, row: dict[str, Any]) -> None:
            log.info(progress_line(word, task, row))

        run, rows = evaluate_pretrained(request, line)
        record.update(run=str(run), rows=len(rows))
        failed = failures(rows)  # written with their reasons; the job must not look finished
        if failed:
            raise PosxError(f"evaluation failed at {'; '.join(failed)} (rows in {run})")
        record["status"] = "finished"
        log.info(f"{word}: {len(rows)} row(s) in {run}")
    except Exception as err:  # one model's failure: recorded, and the sweep goes on
        message = one_line(err) if isinstance(err, PosxError) else (
            f"{type(err).__name__}: {one_line(err)}"
        )  # fmt: skip
        record.update(status="failed", error=message)
        log.error(f"posx: {word} failed: {message}")
    write_json(job_dir / JOB_FILE, record)


def _places(overrides: list[str], dirs: list[Path]) -> tuple[Path, Path]:
    """The sweep's directory and results root, from the overrides that are not swept (as
    Hydra resolves them)."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    cfg = compose_pretrained(fixed, dirs, hydra_node=True)
    return Path(OmegaConf.select(cfg, "hydra.sweep.dir")), Path(str(cfg.root))


def check_jobs(overrides: list[str], dirs: list[Path]) -> int:
    """Composes and checks every job of the sweep before any runs (a typo is one line, not a
    failed job per model).

    Returns:
        The number of jobs.

    Raises:
        ConfigError: An override that does not apply, or a bad setting in some job.
    """
    try:
        jobs = expand_sweep([o for o in overrides if not o.startswith("hydra")])
    except Exception as err:  # Hydra's grammar errors: one line
        raise ConfigError(f"cannot read the overrides: {one_line(err)}") from err
    for job in jobs:
        request_from_config(compose_pretrained(job, dirs))
    return len(jobs)


def run_sweep(overrides: list[str], dirs: list[Path] | None = None) -> Path:
    """``posx eval -m OVERRIDES``: every job through Hydra's launcher, then a summary.

    Args:
        overrides: Hydra overrides of ``configs/pretrained.yaml`` (``hf=A,B``,
            ``hydra/launcher=local_parallel`` ...).
        dirs: The user's config dirs (default: ``POSX_CONFIG_PATH``).

    Returns:
        The sweep directory.

    Raises:
        ConfigError: A bad override (before any job starts).
        PosxError: Some jobs failed (after all ran).
    """
    dirs = user_config_dirs() if dirs is None else dirs
    extra = searchpath_override(dirs)
    if not any(o.split("=", 1)[0].lstrip("+") == "invocation" for o in overrides):
        extra.append(f"invocation={new_invocation()}")  # one sweep directory, every worker
    jobs = check_jobs(overrides, dirs)
    sweep_dir, root = _places([*overrides, *extra], dirs)
    print(f"sweep directory: {sweep_dir} ({jobs} job(s))", flush=True)

    @hydra.main(config_path=str(CONFIG_DIR), config_name=CONFIG_NAME, version_base="1.3")
    def hydra_eval(cfg: DictConfig) -> None:
        _job(cfg)

    saved_argv = sys.argv  # @hydra.main reads sys.argv: Hydra has no call that takes a list
    sys.argv = ["posx eval", "-m", *overrides, *extra]
    try:
        hydra_eval()
    except ValueError as err:
        raise ConfigError(one_line(err)) from err
    finally:
        sys.argv = saved_argv
    _end_of_sweep(sweep_dir, jobs, root)
    return sweep_dir


def job_records(sweep_dir: Path) -> list[dict[str, Any]]:
    """Every job's ``job.json`` in the sweep directory (a damaged one counts as failed)."""
    out = []
    for path in sorted(sweep_dir.glob(f"*/{JOB_FILE}")):
        try:
            out.append(load_json_object(path))
        except (OSError, ValueError) as err:
            out.append({"model": path.parent.name, "status": "failed", "error": one_line(err)})
    return out


def _end_of_sweep(sweep_dir: Path, jobs: int, root: Path) -> None:
    """The sweep's summary; raises when a job failed or never finished."""
    records = job_records(sweep_dir)
    failed = [
        f"{r.get('model')} ({r.get('error')})" for r in records if r.get("status") != "finished"
    ]
    lost = jobs - len(records)
    status = f"{jobs} job(s)" + (f", {len(failed) + lost} failed" if failed or lost else "")
    print(f"sweep done: {status} in {sweep_dir}\nnext:\n  posx report --root {root}", flush=True)
    if failed or lost:
        lost_text = [f"{lost} job(s) left no record"] if lost > 0 else []
        raise PosxError(f"{len(failed) + max(lost, 0)} pretrained evaluation(s) failed: "
                        + "; ".join([*failed, *lost_text]))  # fmt: skip
