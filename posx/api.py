"""posx from Python (a notebook): compose a config, train it, evaluate the run, load results,
report.

    import posx
    cfg = posx.compose("encoding=alibi", "task=copy", "train.steps=200")
    run = posx.train(cfg)                      # the run directory, as `posx train` makes it
    posx.evaluate(run, [64, 128, 256])          # eval.csv rows, as a DataFrame
    df = posx.load_results(cfg.root)            # every eval.csv row under the root
    table = posx.report(cfg.root, html="report.html")  # `posx report`'s summary, as a DataFrame

Runs made here are the same as the command line's: same directory names, ``run.json``,
``.hydra/config.yaml``, checkpoint and ``eval.csv``; ``posx eval`` and ``posx report`` read them.
(``posx resume`` needs Hydra's record of the command line, which a run made here does not have;
train it again with the same ``cfg`` and ``cfg.train.resume=True``, ``cfg.invocation`` set to
the run's.)
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf, open_dict

from posx.config.compose import compose as compose_config
from posx.config.compose import config_dirs as config_dirs_of
from posx.config.compose import new_invocation, register
from posx.config.hints import one_line
from posx.config.paths import user_config_dirs
from posx.config.run_names import chosen_options, run_name, run_names
from posx.config.trust import api_trust, trust_wording, trusted_prefixes
from posx.config.validate import validate
from posx.errors import Interrupted, PosxError
from posx.report.data import load_evals
from posx.report.table import report
from posx.runs import evaluate_runs, select_runs, train_and_evaluate
from posx.runs.job import mark_failed
from posx.runs.overrides import eval_lengths_override
from posx.runs.preflight import check_buildable
from posx.saved import SavedRun
from posx.storage.results import atomic_write

__all__ = ["compose", "evaluate", "load_results", "report", "train"]

# The config dirs given to compose() in this process, in order: evaluate()'s default, so that a
# run composed with config_dirs=[...] evaluates without repeating them. Kept in memory, never
# read from a run: the dirs a run directory records are not the user's and grant no trust
# (posx.config.trust).
_COMPOSED_DIRS: list[Path] = []


def compose(*overrides: str, config_dirs: Sequence[str | Path] = ()) -> DictConfig:
    """The validated config ``posx train OVERRIDES`` would run with.

    Args:
        overrides: Hydra overrides, e.g. ``"encoding=alibi"``, ``"train.steps=200"``.
        config_dirs: Your own config directories (as ``posx --config-dir``), searched after the
            built-in configs and before ``POSX_CONFIG_PATH``'s.

    Returns:
        The config; ``cfg.chosen`` records which yaml each group came from, which names the run.

    Raises:
        ConfigError: A bad override or value (one line).
    """
    dirs, rest = config_dirs_of(user_config_dirs(config_dirs), overrides)
    _COMPOSED_DIRS.extend(d for d in dirs if d not in _COMPOSED_DIRS)
    cfg = compose_config(rest, dirs, hydra_node=True)
    chosen = chosen_options(cfg.hydra.runtime.choices, dirs)
    with open_dict(cfg):
        del cfg["hydra"]
    cfg.chosen = chosen
    validate(cfg)
    return cfg


def train(cfg: DictConfig) -> Path:
    """Trains ``cfg`` (then evaluates at ``cfg.eval.lengths`` when ``cfg.train.eval_at_end``).

    Args:
        cfg: A config from :func:`compose`, edited or not.

    Returns:
        The run directory: ``<root>/runs/<task>_<encoding>_L<length>_s<seed>_<invocation>``.

    Raises:
        ConfigError: An invalid config, before anything is written.
        PosxError: Training failed (recorded in the run's ``run.json``).
        Interrupted: Ctrl-C; the checkpoint is saved.
    """
    register()
    cfg = copy.deepcopy(cfg)  # the caller's config stays as it was
    if not cfg.invocation:
        cfg.invocation = new_invocation()
    validate(cfg)
    names = run_names(cfg, cfg.get("chosen") or {})
    check_buildable(cfg)  # a config that cannot train leaves no run directory behind
    run_dir = (Path(cfg.root) / "runs" / f"{run_name(cfg, names)}_{cfg.invocation}").absolute()
    # What `posx eval` reads (Hydra writes the same file for a command-line run).
    atomic_write(run_dir / ".hydra" / "config.yaml", OmegaConf.to_yaml(cfg))
    try:
        train_and_evaluate(cfg, run_dir, names)
    except Interrupted:
        raise
    except Exception as err:
        message = one_line(err) if isinstance(err, PosxError) else f"{type(err).__name__}: {err}"
        mark_failed(run_dir, message)
        raise
    return run_dir


def evaluate(
    run: str | Path | SavedRun,
    lengths: Sequence[int] | None = None,
    overrides: Sequence[str] = (),
    device: str = "auto",
    trust: Sequence[str] = (),
    config_dirs: Sequence[str | Path] | None = None,
) -> pd.DataFrame:
    """Evaluates a trained run at ``lengths`` (default: its ``eval.lengths``), as ``posx eval``.

    A run's config is built only from posx's classes and those you trust, as ``posx eval``
    does (:mod:`posx.config.trust`): the ``_target_``s named in your config dirs' yamls,
    ``trust``, and ``POSX_TRUST``.

    Args:
        run: The run directory, or a run opened as :class:`posx.saved.SavedRun`.
        lengths: Eval lengths, strictly increasing.
        overrides: Eval-time overrides (``"encoding.scaling.type=yarn"``), recorded per row.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        trust: Module prefixes (or exact targets) whose ``_target_`` classes may be built besides
            posx's own and your config dirs', as ``posx eval --trust``.
        config_dirs: Your config directories, as ``posx --config-dir`` (``POSX_CONFIG_PATH``'s
            are added). Default: those given to :func:`compose` in this process.

    Returns:
        The rows written to the run's ``eval.csv``, one per length.

    Raises:
        UntrustedTarget: The run names a class you have not trusted; the message says which
            ``trust=[...]`` allows it.
        PosxError: Not a trained run, or a length it cannot be evaluated at.
    """
    saved = SavedRun.of(run)
    # eval.lengths=[...] is the lengths to evaluate, as `posx eval` reads it
    lengths_, overrides = eval_lengths_override(overrides, list(lengths) if lengths else None)
    given = _live(_COMPOSED_DIRS) if config_dirs is None else list(config_dirs)
    trusted = trusted_prefixes(trust, user_config_dirs(given))
    with trust_wording(api_trust):  # refusals say trust=[...], not the CLI's --trust
        # the checks `posx eval RUN` makes before any work (a run, with a checkpoint, trusted);
        # the run is opened here once, and every later step asks the opened run
        chosen = select_runs([saved], saved.path.parent, list(overrides), trusted)
        done = evaluate_runs(chosen.runs, lengths_, list(overrides), device, trust=trusted)
    return pd.DataFrame(done[chosen.runs[0]])


def _live(dirs: Sequence[Path]) -> list[Path]:
    """The directories of ``dirs`` that still exist: one removed since it was composed with is
    nobody's config any more, and must not fail an unrelated evaluation."""
    return [d for d in dirs if d.is_dir()]


def load_results(root: str | Path = "results") -> pd.DataFrame:
    """Every ``eval.csv`` row below ``root`` with its run's identity (``encoding``, ``task``,
    ``seed``, ``train_length``, ...) and ``variant`` (the encoding and eval-time overrides)."""
    return load_evals(Path(root))
