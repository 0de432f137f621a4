"""``posx extend hf:NAME_OR_DIR``, and ``posx resume`` / ``posx eval`` of the run it writes: the
pretrained-model branch of those commands (the work is posx/pretrained/extend/)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from posx.cli._app import console, err_console
from posx.errors import ConfigError, Interrupted
from posx.pretrained.extend.settings import Options

if TYPE_CHECKING:
    from posx.runtime.distributed import World
    from posx.saved import SavedRun


def _say(text: str) -> None:
    err_console.print(text, markup=False, highlight=False, soft_wrap=True)


def _print(text: str) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def _main_process() -> bool:
    """Rank 0 under torchrun (or the one process), read from the environment: what says where
    the run goes speaks before torch is imported."""
    return os.environ.get("RANK", "0") == "0"


def extend_hf(word: str, words: list[str], options: Options) -> None:
    """``posx extend hf:... key=value ... [--dry-run]``: plan, fine-tune, save, evaluate.

    The run directory and what is done are said first, from the settings and the model's
    ``config.json`` alone (a typo is answered, and the run named, before torch and
    transformers are imported: those take seconds).
    """
    from posx.pretrained.extend.preview import preview
    from posx.pretrained.extend.settings import parse_settings

    other = [w for w in words if "=" not in w]
    if other:
        raise ConfigError(f"posx extend hf:... takes key=value settings; got {other[0]}")
    values = parse_settings(words)
    early = preview(word, values, options)
    if _main_process():  # on stdout, as the plan: stderr keeps one line for a refusal
        if early.run is not None:
            _print(f"output     {early.run}" if options.dry_run else f"run directory: {early.run}")
        _print(f"doing      {early.doing}" if options.dry_run else early.doing)
    if options.dry_run and _dry_run_from_files(word, values, options):
        return
    try:
        from posx.pretrained.extend.plan import check_fits, make_plan
        from posx.pretrained.extend.run import extend_pretrained, run_directory
        from posx.runtime.distributed import init_process_group

        plan = make_plan(word, values, options, init_process_group())
    except KeyboardInterrupt:
        raise Interrupted("interrupted before training began; nothing was written") from None
    if run_directory(plan) != early.run and plan.world.is_main:  # the config read otherwise
        _print(f"{'output     ' if options.dry_run else 'run directory: '}{run_directory(plan)}")
    if options.dry_run:
        if plan.world.is_main:
            _print_plan(plan.lines(), lambda: check_fits(plan))
        return
    run = extend_pretrained(plan, _say)
    _evaluate_trained(run)


def _dry_run_from_files(word: str, values: dict[str, Any], options: Options) -> bool:
    """``--dry-run`` of a local model answered from its files alone (no torch, no
    transformers: a second, not the seconds they take to import); False where only the full
    plan can answer (:func:`posx.pretrained.extend.outline.draft_plan`)."""
    from posx.pretrained.extend.memory import check_room, room
    from posx.pretrained.extend.outline import draft_plan

    draft = draft_plan(word, values, options)
    if draft is None:
        return False

    def check() -> None:
        found = room(values["train.max_memory"], draft.free)
        check_room(draft.shape, draft.layout, found, draft.outline.name)

    _print_plan(draft.outline.lines(), check)
    return True


def _print_plan(lines: list[str], check: Callable[[], None]) -> None:
    """The plan, a fact a line, and whether it fits (``check`` refuses what does not)."""
    for line in lines:
        _print(line)
    try:
        check()
        _print("fits       yes")
    except ConfigError as err:
        _print(f"fits       no: {err}")


def _evaluate_trained(run: Path) -> None:
    """The evaluation after training: by rank 0 alone (under torchrun the others have left)."""
    from posx.runtime.distributed import World

    _evaluate(run, None, processes=World())


def _evaluate(
    run: Path,
    lengths: list[int] | None,
    suites: tuple[str, ...] = ("text",),
    given: dict[str, Any] | None = None,
    processes: World | None = None,
) -> None:
    """Rank 0 evaluates the extended model into its run and prints the table (``suites``,
    ``given``: what ``posx eval RUN --suite ruler ruler.samples=N`` asked; ``processes``:
    those that evaluate, None for torchrun's)."""
    from posx.pretrained.extend.run import evaluate_extension
    from posx.pretrained.run import progress_line
    from posx.report.ruler import ruler_table
    from posx.runs.messages import eval_table
    from posx.runtime.distributed import world
    from posx.saved import SavedRun

    if not world().is_main:
        return
    info = SavedRun(run).info
    asked = (info.get("extension") or {}).get("settings", {}).get("eval.lengths")
    if asked == [] and lengths is None:
        _print(str(run))
        return

    def line(task: str, row: dict[str, Any]) -> None:
        _say(progress_line(str(run), task, row))

    where, rows = evaluate_extension(run, info, lengths, line, suites, given, processes)
    _print(str(where))
    threshold = (given or {}).get("ruler.threshold", 85.6)
    for text in ruler_table(rows, threshold):
        _print(text)
    rows = [r for r in rows if not str(r["task"]).startswith("ruler/")]
    for text in eval_table(rows, rows[0]["train_length"]) if rows else []:
        _print(text)


def extension_info(run: Path | SavedRun) -> dict[str, Any] | None:
    """``run.json`` of a pretrained model's extension, else None (any other run, or none)."""
    from posx.saved import RunKind, SavedRun

    saved = SavedRun.of(run)
    if not (saved.path / "run.json").is_file() or saved.kind is not RunKind.PRETRAINED_EXTENSION:
        return None
    return saved.info


def resume_hf(run: Path, info: dict[str, Any], dirs: list[Path]) -> None:
    """``posx resume RUN`` of a pretrained model's extension (``dirs``: the user's config dirs,
    where its method may be); the run and what it does are said before torch is imported."""
    from posx.pretrained.extend.preview import resumable

    resumable(run, info)  # a finished or damaged run: one line, before anything is said
    if _main_process():
        ext, parent = info.get("extension") or {}, info.get("parent") or {}
        _print(f"run directory: {run}")
        _print(f"resuming {info.get('encoding')}: extension={ext.get('method')} of "
             f"{parent.get('model_id')} at step {info.get('step', 0)} of "
             f"{ext.get('steps')}")  # fmt: skip
    try:
        from posx.pretrained.extend.run import resume_pretrained
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted before training went on; run: posx resume {run}") from None
    resume_pretrained(run, info, Options(config_dirs=dirs), _say)
    _evaluate_trained(run)


def extend_hf_runs(
    runs: list[Path], lengths: str | None, suite: str | None = None, words: list[str] = ()
) -> list[SavedRun] | None:
    """``posx eval RUN ...`` of pretrained models' extensions: evaluated as ``posx eval hf:``
    evaluates a model, into their own runs (``suite``: ``--suite``; ``words``: the command's
    ``key=value`` words, of which the ``ruler.*`` settings apply).

    Returns:
        None when the runs named were extensions and are evaluated; else every word opened as
        a run, for posx eval to go on with (each run's files are then read once).

    Raises:
        ConfigError: Extensions and posx runs named together.
    """
    from posx.cli.options import parse_lengths
    from posx.saved import SavedRun

    opened = [SavedRun(run) for run in runs]
    found = [run for run in opened if extension_info(run) is not None]
    if not found:
        return opened
    if len(found) != len(runs):
        raise ConfigError(
            "evaluate pretrained models' extensions and posx runs in separate commands"
        )
    from posx.pretrained.request import DEFAULTS, parse_suites, parse_values

    asked = parse_values([w for w in words if w.startswith("ruler.")])
    given = {k: v for k, v in asked.items() if k.startswith("ruler.") and v != DEFAULTS[k]}
    for run in found:
        _evaluate(run.path, parse_lengths(lengths) if lengths else None, parse_suites(suite),
                  given)  # fmt: skip
    return None
