"""posx report and posx check."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from posx.cli._app import app, config_dirs, console, err_console, write_out
from posx.errors import ConfigError

CHECK_FORMATS = ("rich", "md", "json")
# The filters posx report and posx check share (one parser: report.build.filter_rows).
TASK_HELP = "Only these tasks (a,b or repeat)."
WHERE_HELP = (
    "Keep runs whose config key (or eval.csv column) has this value, KEY=VALUE, e.g. "
    "model.d_model=128 (repeatable; all must hold)."
)

if TYPE_CHECKING:  # the CLI imports pandas and the report package only when a command runs
    from rich.console import Console

    from posx.claims.find import Checked
    from posx.report import Report


@app.command()
def report(
    ctx: typer.Context,
    root: Path = typer.Option(
        Path("results"), "--root", help="Results root (every eval.csv below it)."
    ),
    metric: str = typer.Option(
        "auto",
        "--metric",
        help="auto (bpb for text, exact_match for synthetic tasks), loss, ppl, bpb, acc, "
        "exact_match, or any other numeric eval.csv column (e.g. peak_mem_mb).",
    ),
    task: list[str] = typer.Option(None, "--task", "-t", help=TASK_HELP),
    encoding: list[str] = typer.Option(
        None, "--encoding", "-e", help="Only these encodings (x for ×: rope+yarnx4)."
    ),
    mode: list[str] = typer.Option(None, "--mode", help="Only these eval modes (full, sliding)."),
    variant: list[str] = typer.Option(
        None,
        "--variant",
        help="Eval-time variants to show (repeatable): 'base' (no overrides), 'all', a label "
        "as the tables show it or part of one ('rope+yarn×4', 'yarn', 'yarnx4'), or key=value "
        "tokens the overrides must contain, e.g. 'encoding.scaling.type=yarn'.",
    ),
    by: list[str] = typer.Option(
        None,
        "--by",
        help="Compare model, train_length, task, mode, seed or any config key (e.g. "
        "train.steps) side by side in one table (default: one table each).",
    ),
    where: list[str] = typer.Option(None, "--where", help=WHERE_HELP),
    rank: bool = typer.Option(
        None,
        "--rank/--no-rank",
        help="Mean-reciprocal-rank table across tasks (default: when 2+ tasks): learned runs "
        "only, ties share their average rank, a task where no run is above chance carries no "
        "rank, 'tasks' = tasks a run was ranked in; with --format csv, write the ranking "
        "instead of the cells.",
    ),
    rank_lengths: str = typer.Option(
        "ood", "--rank-lengths", help="Rank on 'ood' (past the training length) or 'all' lengths."
    ),
    learned: float = typer.Option(
        0.5,  # posx.report.chance.LEARNED (not imported: the CLI loads pandas lazily)
        "--learned",
        help="A run whose exact match (above chance: (em - chance) / (1 - chance)) or other "
        "accuracy at its training length is below this is marked 'not learned': shown, and "
        "ranked last in the tasks that are ranked. 0 = off.",
    ),
    learned_loss: float = typer.Option(
        None,
        "--learned-loss",
        help="The same for lower-is-better metrics (loss, bpb, ppl): a run above this at its "
        "training length is 'not learned' (default: off).",
    ),
    ratio: bool = typer.Option(
        True,
        "--ratio/--no-ratio",
        help="Each cell relative to the same run at its training length (×r, same metric).",
    ),
    digits: int = typer.Option(3, "--digits", help="Decimals in the tables."),
    threshold: float = typer.Option(
        85.6,  # posx.ruler.scoring.THRESHOLD (not imported: the CLI loads the report lazily)
        "--threshold",
        help="RULER: the average score (percent) a length needs to count toward the effective "
        "length (85.6, Llama-2-7B's at 4k, as in the paper; a small model wants its own).",
    ),
    fmt: str = typer.Option(
        None,
        "--format",
        "-f",
        help="rich, md, csv, latex, html or json (default: rich, or from -o). json: one "
        "document, `cells` (one object per row and eval length: mean, std, n, ratio, ...), "
        "`rank` and, with --claims, `claims`; nothing else is printed on stdout.",
    ),
    output: Path = typer.Option(
        None,
        "--output",
        "-o",
        help="Write to this file (.md, .csv, .tex, .html, .json pick the format).",
    ),
    plot: Path = typer.Option(
        None, "--plot", help="Write the plots (PNG and SVG) into this directory."
    ),
    claims: bool = typer.Option(
        False,
        "--claims",
        help="Also check the claims of the presets the runs record (as `posx check ROOT`); "
        "the exit status is then posx check's.",
    ),
) -> None:
    """Compare encodings across eval lengths: mean ± std over seeds, ratio to the training
    length, best per column marked, ranking across tasks; export tables and plots."""
    from posx.report import (
        check_destinations,
        export_text,
        make_report,
        output_format,
        shows_tables,
    )

    kind = output_format(fmt, output)
    check_destinations(output, plot)
    result = make_report(
        root,
        metric=metric,
        tasks=task,
        encodings=encoding,
        modes=mode,
        variants=variant,
        by=by,
        rank=rank,
        rank_lengths=rank_lengths,
        digits=digits,
        ratio=ratio,
        where=where,
        learned=learned,
        learned_loss=learned_loss,
        threshold=threshold,
    )
    for warning in result.warnings:
        err_console.print(f"posx: warning: {warning}", markup=False, style="yellow")
    checked = _add_claims(ctx, root, result, task, where) if claims else None
    if shows_tables(kind, fmt, output):
        _print_tables(result, with_claims=checked is not None)
    extra = _claims_records(checked) if kind == "json" and checked is not None else None
    text = export_text(result, kind, output, rank_csv=bool(rank), extra=extra)
    if text is not None:
        _write_text(text, output)
    if plot is not None:
        # with the export on stdout, its messages go to stderr: stdout stays one document
        _write_plots(result, plot, err_console if text and output is None else console)
    if checked is not None:
        _claims_exit(checked.verdicts)


def _add_claims(
    ctx: typer.Context, root: Path, result: Report, task: list[str] | None, where: list[str] | None
) -> Checked:
    """Checks the claims of the presets the runs under ``root`` record (as ``posx check``, on
    the runs of the report's ``--task`` and ``--where``) and adds their verdicts to the report
    as its last section."""
    from posx.claims.find import check_root
    from posx.claims.render import claims_section

    checked = check_root(root, config_dirs(ctx), tasks=task, where=where)
    result.sections.append(claims_section(checked.verdicts, checked.notes))
    return checked


def _claims_records(checked: Checked) -> dict[str, list]:
    """The claims' verdicts for ``posx report --claims --format json``: the ``claims`` key, as
    ``posx check --format json`` writes them."""
    from posx.claims.render import claims_records

    return {"claims": claims_records(checked.verdicts)}


def _print_tables(result: Report, with_claims: bool) -> None:
    """Prints the report's tables on the terminal, then the claims' verdicts if it has them
    (their section is the last one, see ``_add_claims``)."""
    from posx.report import rich_renderables
    from posx.report.ruler import section_lines

    for renderable in rich_renderables(result):
        console.print(renderable)
    ruler = result.sections[:-1] if with_claims else result.sections
    for section in ruler:
        for line in section_lines(section):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    if with_claims:
        from posx.claims.render import to_rich

        console.print(to_rich(result.sections[-1]))


def _write_text(text: str, output: Path | None) -> None:
    """Writes the exported report to ``output`` (atomically), or to stdout without one."""
    from posx.storage.results import atomic_write

    if output is None:
        write_out(text)
        return
    atomic_write(output, text)
    console.print(f"wrote {output}", soft_wrap=True)


def _write_plots(result: Report, directory: Path, says: Console) -> None:
    """Writes the report's plots into ``directory``, says so on ``says`` and why any plot was
    left out on stderr."""
    from posx.report import write_report_plots

    paths, skipped = write_report_plots(result, directory)
    says.print(f"wrote {len(paths)} plot files to {directory}/", soft_wrap=True)
    for stem, why in skipped:
        err_console.print(f"posx: no plot {stem}: {why}", markup=False, soft_wrap=True)


def _claims_exit(verdicts: list) -> None:
    """Ends ``posx check`` / ``posx report --claims`` with the claims' exit status (0 all hold,
    1 some fail, 3 some inconclusive), saying so on stderr when it is not 0."""
    from posx.claims.check import exit_code
    from posx.claims.render import summary

    code = exit_code(verdicts)
    if code:
        err_console.print(f"posx: {summary(verdicts)}", markup=False, soft_wrap=True)
        raise typer.Exit(code)


@app.command()
def check(
    ctx: typer.Context,
    root: Path = typer.Argument(Path("results"), help="Results root (every run below it)."),
    experiment: str = typer.Option(
        None,
        "--experiment",
        help="Check this preset's claims only, on the runs that record it (or, where none "
        "does, on the runs that record no preset).",
    ),
    fmt: str = typer.Option(
        "rich",
        "--format",
        "-f",
        help="rich (the table, or one block per claim on a narrow terminal), md, or json (one "
        "object per claim: id, verdict, statement, measured, seeds, seed_agreement, reason, "
        "notes, near_bound).",
    ),
    min_seeds: int = typer.Option(3, "--min-seeds", help="Seeds each term needs for a verdict."),
    agreement: float = typer.Option(
        0.8, "--agreement", help="Share of seed-level comparisons a verdict needs (0.5-1]."
    ),
    partial: bool = typer.Option(
        False,
        "--partial",
        help="Also judge runs evaluated before their last step (interrupted; left out, with a "
        "note, by default).",
    ),
    task: list[str] = typer.Option(
        None,
        "--task",
        "-t",
        help=TASK_HELP + " Without it each preset's claims judge the tasks the preset trains "
        "(its configs/experiment file) and the tasks its claims name.",
    ),
    where: list[str] = typer.Option(None, "--where", help=WHERE_HELP),
    tuning_seeds: bool = typer.Option(
        False,
        "--tuning-seeds",
        help="Also judge the runs of the seeds that chose a preset's settings (tuning_seeds in "
        "its claims file; left out, with a note, by default).",
    ),
) -> None:
    """Check each preset's claims (configs/claims/NAME.yaml) against its runs under ROOT.

    Each claim: ✓ holds, ✗ fails or ? inconclusive, with the measured values, seeds and seed
    agreement. Exit status: 0 every claim holds, 1 some claim fails, 3 none fails but some are
    inconclusive (2: bad input)."""
    from posx.claims.find import check_root
    from posx.claims.render import claims_json, claims_section, to_markdown, to_rich

    if fmt not in CHECK_FORMATS:
        raise ConfigError(f"unknown --format {fmt!r}; choose from {', '.join(CHECK_FORMATS)}")
    checked = check_root(
        root, config_dirs(ctx), experiment, min_seeds, agreement, partial, tasks=task,
        where=where, tuning=tuning_seeds,
    )  # fmt: skip
    if fmt == "json":
        write_out(claims_json(checked.verdicts, checked.notes, min_seeds, agreement))
    else:
        section = claims_section(checked.verdicts, checked.notes, min_seeds, agreement)
        if fmt == "md":
            write_out(to_markdown(section))
        else:
            console.print(to_rich(section))
    _claims_exit(checked.verdicts)
