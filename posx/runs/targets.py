"""What a word given to ``posx eval`` as a run is, when it is not a run: a results root, a sweep
directory, a folder or file inside a run, an ``hf:`` corpus, an option or a ``key:value`` typo.

``posx eval`` asks here before it opens a run, so that ``posx eval results`` says "a results root
with 6 runs: use --root" instead of "run has no checkpoint".
"""

from __future__ import annotations

import shlex
from pathlib import Path

from posx.config.paths import GROUPS
from posx.runs.overrides import COLON_SETTING
from posx.saved import SavedRun
from posx.storage.checkpoint import CHECKPOINT
from posx.storage.results import find_runs
from posx.tasks.corpora import HF_PREFIX

SWEEP_FILE = "multirun.yaml"  # Hydra writes it at the top of every sweep directory


def _q(path: Path | str) -> str:
    return shlex.quote(str(path))


def _runs(n: int) -> str:
    return f"{n} run" + ("" if n == 1 else "s")


def _enclosing_run(path: Path) -> Path | None:
    """The run directory ``path`` lies in (``RUN/checkpoint``, ``RUN/.hydra``), or None: as the
    user spelled it where it can be (``results/runs/X``), else absolute."""
    for parent in [*path.parents, *path.absolute().parents]:
        if SavedRun(parent).is_run():
            return parent
    return None


def _inside_run(arg: str, path: Path) -> str | None:
    """Says which run a file or folder inside a run belongs to."""
    run = _enclosing_run(path)
    if run is None:
        return "is a file, not a run directory" if path.is_file() else None
    what = (
        "a run's checkpoint folder"
        if path.name == CHECKPOINT and path.is_dir()
        else ("a file" if path.is_file() else "a folder") + " inside a run"
    )
    return f"{arg} is {what}; pass the run: posx eval {_q(run)}"


def _folder_of_runs(arg: str, path: Path) -> str | None:
    """Says that a folder holding runs (a sweep directory, a results root) is not one run."""
    runs = find_runs(path)
    if not runs:
        return None
    if (path / SWEEP_FILE).is_file():
        what = f"a sweep directory with {_runs(len(runs))}"
    else:
        what = f"a results root with {_runs(len(runs))}"
    return f"{arg} is {what}, not one run: use `posx eval --root {_q(arg)}` to evaluate them all"


def _missing(arg: str) -> str | None:
    """Says what a word that is no path was meant to be: an option, an ``hf:`` corpus, or a
    setting written ``key:value``."""
    if arg.startswith("-"):
        flag = arg.split("=", 1)[0]
        group = flag.lstrip("-")
        fixed = f"a run is evaluated with the {group} it was trained with; " * (group in GROUPS)
        return (
            f"posx eval has no option {flag} (see `posx eval --help`): {fixed}settings of the "
            "run's config are key=value overrides, e.g. encoding.KEY=VALUE or eval.tokens=4096"
        )
    if arg.startswith(HF_PREFIX):
        return (
            f"{arg} is not a run: '{HF_PREFIX}' names a corpus for task.corpus (e.g. `posx train "
            f"task=text task.corpus={arg}`); a pretrained model is evaluated on its own, as "
            "posx eval hf:NAME_OR_DIR (docs/pretrained.md)"
        )
    found = COLON_SETTING.match(arg)
    if found is None:
        return None
    key, value = found[1], found[2]
    if key in GROUPS:  # `encoding:alibi`: another encoding's weights do not exist in this run
        return (
            f"{arg!r} is neither a run directory nor an override: a run is evaluated with the "
            f"{key} it was trained with; change one of its settings as {key}.KEY=VALUE, or "
            f"train another with `posx train {key}={value}`"
        )
    return f"{arg!r} is neither a run directory nor an override (key=value): {key}={value}"


def explain_run_argument(arg: str) -> str | None:
    """Why ``arg``, given to ``posx eval`` as a run, is not one, in one line with what to pass
    instead; None when it may be a run (or is nothing posx recognises: the caller's own
    message, "does not exist" or "has no checkpoint", says the rest).

    Args:
        arg: The word as typed.
    """
    path = Path(arg)
    if not path.exists():
        return _missing(arg)
    if path.is_dir() and SavedRun(path).is_run():
        return None
    return _inside_run(arg, path) or (_folder_of_runs(arg, path) if path.is_dir() else None)
