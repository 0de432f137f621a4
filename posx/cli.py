"""posx command line: train, eval, report, list, show-config. Parses, then calls."""

from __future__ import annotations

import os
import sys
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

import typer
from rich.console import Console

from posx.errors import ConfigError, PosxError, PosxWarning

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Length-extrapolation experiments: train at one length, evaluate at many, compare.",
)
console = Console()
err_console = Console(stderr=True)
PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


def debug_requested(argv: list[str] | None = None) -> bool:
    """``posx --debug COMMAND ...`` (the option before the command) or ``POSX_DEBUG=1``."""
    if os.environ.get("POSX_DEBUG", "") not in ("", "0"):
        return True
    for arg in (sys.argv if argv is None else argv)[1:]:
        if not arg.startswith("-"):
            return False
        if arg == "--debug":
            return True
    return False


@app.callback()
def _root(
    ctx: typer.Context,
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors."),
    config_dir: list[Path] = typer.Option(
        None,
        "--config-dir",
        help="A directory of your own encoding/, task/, model/, experiment/ ... yamls, added "
        "beside the built-in ones (repeatable; also POSX_CONFIG_PATH=DIR1:DIR2).",
    ),
) -> None:
    """(``--debug`` is read by :func:`debug_requested`, which also sees ``POSX_DEBUG``.)"""
    ctx.obj = {"config_dirs": list(config_dir or [])}


def config_dirs(ctx: typer.Context) -> list[Path]:
    """The user's config dirs: ``posx --config-dir DIR ...``, then ``POSX_CONFIG_PATH``."""
    from posx.config_path import user_config_dirs

    return user_config_dirs((ctx.obj or {}).get("config_dirs", []))


@app.command(context_settings=PASS_THROUGH)
def train(ctx: typer.Context) -> None:
    """Train one model; arguments are Hydra overrides (-m for sweeps, --cfg job to print).

    Examples: `posx train encoding=alibi task=copy train.steps=500`,
    `posx train -m encoding=nope,rope,alibi seed=0,1,2`. See `posx list` for the options.
    """
    from posx.runs import run_train

    run_train(list(ctx.args), debug=debug_requested(), dirs=config_dirs(ctx))


TRUST_HELP = (
    "Also build _target_ classes under this module prefix (e.g. mypkg) when loading runs; "
    "repeatable; adds to POSX_TRUST (comma-separated). posx's own classes, and the _target_s "
    "in your config dirs (--config-dir, POSX_CONFIG_PATH), are always trusted."
)


@app.command()
def resume(
    ctx: typer.Context,
    run: Path = typer.Argument(..., help="A run directory with a checkpoint."),
    trust: list[str] = typer.Option(None, "--trust", help=TRUST_HELP),
) -> None:
    """Continue an interrupted run from its last checkpoint (same config, same directory)."""
    from posx.runs import run_resume
    from posx.trust import trusted_prefixes

    dirs = config_dirs(ctx)
    run_resume(run, debug=debug_requested(), dirs=dirs, trust=trusted_prefixes(trust, dirs))


@app.command("runs")
def runs_(
    root: Path = typer.Option(Path("results"), "--root", help="Results root to list runs under."),
) -> None:
    """One line per run: status, encoding, task, model, training length, steps, seed, final
    loss, evaluated lengths and its directory."""
    from posx.runs.listing import format_runs, list_runs

    found = list_runs(root)
    if not found:
        console.print(f"no runs under {root}; start one with `posx train`", soft_wrap=True)
        return
    sys.stdout.write("\n".join(format_runs(found)) + "\n")


def parse_lengths(text: str) -> list[int]:
    from posx.config import positive_lengths

    values: list[int] = []
    for part in text.split(","):
        try:
            values.append(int(part.strip()))
        except ValueError as err:
            raise ConfigError(
                f"--lengths must be comma-separated positive integers, got {part!r}"
            ) from err
    return positive_lengths(values, "--lengths")


@app.command("eval", context_settings=PASS_THROUGH)
def eval_(
    ctx: typer.Context,
    runs: list[Path] = typer.Argument(
        None, help="Run directories (default: every run under --root)."
    ),
    lengths: str = typer.Option(
        None, "--lengths", "-l", help="e.g. 512,1024,2048 (default: each run's eval.lengths)."
    ),
    root: Path = typer.Option(
        Path("results"), "--root", help="Where to look for runs when none are named."
    ),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    mode: str = typer.Option(
        None, "--mode", help="full (non-overlapping sequences) or sliding (default: the run's)."
    ),
    window: int = typer.Option(
        None, "--window", help="sliding: tokens read at once (default: training length)."
    ),
    stride: int = typer.Option(
        None, "--stride", help="sliding: tokens each window moves on (default: window // 2)."
    ),
    buckets: str = typer.Option(
        None, "--buckets", help="per-position loss buckets: log, or a width in tokens."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bar per run."),
    trust: list[str] = typer.Option(None, "--trust", help=TRUST_HELP),
    max_memory: str = typer.Option(
        None, "--max-memory", help="Memory an evaluation may use, e.g. 8G (default: available)."
    ),
) -> None:
    """Evaluate trained runs at longer lengths; writes eval.csv and eval_positions.csv.

    Extra `key=value` arguments override the run's config at evaluation time
    (e.g. `encoding.base=40000`) and are recorded in every row, as are --mode, --window and
    --stride (in their own columns).
    """
    from posx.report.units import eval_summary
    from posx.resources import parse_size
    from posx.runs import evaluate_runs, select_runs
    from posx.runs.evaluation import failures, protocol_overrides
    from posx.trust import trusted_prefixes

    overrides = protocol_overrides(mode, window, stride, buckets)
    overrides += [a for a in ctx.args if "=" in a]
    stray = [a for a in ctx.args if "=" not in a]
    # typer puts key=value words into `runs` when they come after the run dirs
    overrides += [str(r) for r in runs or [] if "=" in str(r) and not Path(r).exists()]
    named = [r for r in runs or [] if str(r) not in overrides]
    if stray:
        raise ConfigError(
            f"unexpected argument(s) {' '.join(stray)}; overrides look like key=value"
        )
    asked = parse_lengths(lengths) if lengths is not None else None
    limit = parse_size(max_memory, "--max-memory")
    trusted = trusted_prefixes(trust, config_dirs(ctx))
    chosen = select_runs(named, root, overrides, trusted)
    for run, why in chosen.skipped:
        err_console.print(f"[yellow]skipping {run}: {why}[/]")
    for _, why in chosen.damaged:
        err_console.print(f"posx: skipping: {why}", markup=False, style="red", soft_wrap=True)

    def show(run: Path, rows: list[dict]) -> None:
        # the report's metric and unit for this task (bits/byte for text, exact match ...)
        console.print(f"[bold]{run.name}[/]  " + "  ".join(eval_summary(r) for r in rows))

    def warn(text: str) -> None:
        err_console.print(f"posx: warning: {text}", markup=False, style="yellow", soft_wrap=True)

    done = evaluate_runs(
        chosen.runs, asked, overrides, device, progress, on_run=show, on_warning=warn,
        trust=trusted, max_memory=limit,
    )  # fmt: skip
    console.print(
        f"wrote eval.csv and eval_positions.csv in {len(chosen.runs)} run(s); "
        "compare with `posx report`"
    )
    failed = [(run, why) for run, rows in done.items() for why in failures(rows)]
    for run, why in failed:
        err_console.print(f"posx: {run.name}: failed at {why}", markup=False, soft_wrap=True)
    if failed:
        raise PosxError(f"{len(failed)} evaluation(s) failed; the reasons are above")
    if chosen.damaged:
        names = ", ".join(run.name for run, _ in chosen.damaged)
        raise PosxError(f"{len(chosen.damaged)} run(s) skipped, damaged or refused: {names}")


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
    task: list[str] = typer.Option(None, "--task", "-t", help="Only these tasks (a,b or repeat)."),
    encoding: list[str] = typer.Option(None, "--encoding", "-e", help="Only these encodings."),
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
    where: list[str] = typer.Option(
        None,
        "--where",
        help="Keep runs whose config key (or eval.csv column) has this value, KEY=VALUE, e.g. "
        "model.d_model=128 (repeatable; all must hold).",
    ),
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
        "accuracy at its training length is below this is marked 'not learned': shown, but "
        "left out of the ranking. 0 = off.",
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
    fmt: str = typer.Option(
        None, "--format", "-f", help="rich, md, csv, latex or html (default: rich, or from -o)."
    ),
    output: Path = typer.Option(
        None, "--output", "-o", help="Write to this file (.md, .csv, .tex, .html pick the format)."
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
    from posx.report import make_report, output_format, render, report_plots, rich_renderables
    from posx.results import atomic_write, check_writable

    kind = output_format(fmt, output)
    # Where the report goes is checked before the results are read, not after.
    if output is not None:
        if output.is_dir():
            raise ConfigError(f"-o {output} is a directory; give a file name such as report.md")
        check_writable(output.parent, "-o directory", "choose another place with -o")
    if plot is not None:
        check_writable(plot, "--plot directory", "choose another directory with --plot")
    result = make_report(
        root,
        metric,
        task,
        encoding,
        mode,
        variant,
        by,
        rank,
        rank_lengths,
        digits,
        ratio,
        where=where,
        learned=learned,
        learned_loss=learned_loss,
    )
    for warning in result.warnings:
        err_console.print(f"posx: warning: {warning}", markup=False, style="yellow")
    checked = None
    if claims:
        from posx.claims.find import check_root
        from posx.claims.render import claims_section

        checked = check_root(root, config_dirs(ctx))
        result.sections.append(claims_section(checked.verdicts, checked.notes))
    if kind == "rich" or (output is not None and fmt is None):
        for renderable in rich_renderables(result):
            console.print(renderable)
        if checked is not None:
            from posx.claims.render import to_rich

            console.print(to_rich(result.sections[-1]))
    if kind != "rich":
        base = output.parent if output is not None else Path.cwd()
        text = render(result, kind, rank_csv=bool(rank) and kind == "csv", base=base)
        if output is not None:
            atomic_write(output, text)
            console.print(f"wrote {output}", soft_wrap=True)
        else:
            sys.stdout.write(text)
    elif output is not None:  # --format rich -o FILE: the same tables as Markdown
        atomic_write(output, render(result, "md"))
        console.print(f"wrote {output}", soft_wrap=True)
    if plot is not None:
        from posx.report.plots import write_plots

        plots = report_plots(result)
        paths = write_plots(plots.figures, plot)
        console.print(f"wrote {len(paths)} plot files to {plot}/", soft_wrap=True)
        for stem, why in plots.skipped:
            err_console.print(f"posx: no plot {stem}: {why}", markup=False, soft_wrap=True)
    if checked is not None:
        _claims_exit(checked.verdicts)


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
        help="Check this preset's claims only, on the runs that record it or record none.",
    ),
    fmt: str = typer.Option("rich", "--format", "-f", help="rich or md."),
    min_seeds: int = typer.Option(3, "--min-seeds", help="Seeds each term needs for a verdict."),
    agreement: float = typer.Option(
        0.8, "--agreement", help="Share of seed-level comparisons a verdict needs (0.5-1]."
    ),
) -> None:
    """Check each preset's claims (configs/claims/NAME.yaml) against its runs under ROOT:
    ✓ holds, ✗ fails or ? inconclusive, with the measured values, seeds and seed agreement.
    Exit status: 0 every claim holds, 1 some claim fails, 3 none fails but some are
    inconclusive (2: bad input)."""
    from posx.claims.find import check_root
    from posx.claims.render import claims_section, to_markdown, to_rich

    if fmt not in ("rich", "md"):
        raise ConfigError(f"unknown --format {fmt!r}; choose from rich, md")
    checked = check_root(root, config_dirs(ctx), experiment, min_seeds, agreement)
    section = claims_section(checked.verdicts, checked.notes, min_seeds, agreement)
    if fmt == "md":
        sys.stdout.write(to_markdown(section))
    else:
        console.print(to_rich(section))
    _claims_exit(checked.verdicts)


@app.command("list")
def list_(
    ctx: typer.Context,
    group: str = typer.Argument(
        None, help="encoding, task, model, train, eval, positions, logger or experiment."
    ),
) -> None:
    """Show the available options of each config group with their descriptions; your own
    (from --config-dir or POSX_CONFIG_PATH) are marked with their directory."""
    from rich.markup import escape
    from rich.table import Table

    from posx.config import GROUPS, describe_option
    from posx.config_path import CONFIG_DIR, options

    if group is not None and group not in GROUPS:  # "encodings" means "encoding"
        group = group.rstrip("s") if group.rstrip("s") in GROUPS else group
    if group is not None and group not in GROUPS:
        raise ConfigError(f"unknown group {group!r}; choose from: {', '.join(GROUPS)}")
    dirs = config_dirs(ctx)
    for g in [group] if group else GROUPS:
        table = Table(title=f"{g} (choose with {g}=NAME)", title_justify="left", show_header=False)
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        if dirs:
            table.add_column(style="magenta", overflow="fold")
        for name, path in sorted(options(g, dirs).items()):
            row = [name, escape(describe_option(g, name, dirs))]
            if dirs:  # where a user's option comes from; built-in ones say so
                builtin = path.is_relative_to(CONFIG_DIR)
                row.append("[dim]posx[/]" if builtin else escape(str(path.parent.parent)))
            table.add_row(*row)
        console.print(table)


@app.command("show-config", context_settings=PASS_THROUGH)
def show_config(ctx: typer.Context) -> None:
    """Print the composed config for the given overrides (what `posx train` would run)."""
    from omegaconf import OmegaConf

    from posx.config import compose

    cfg = compose(list(ctx.args), config_dirs(ctx))
    sys.stdout.write(OmegaConf.to_yaml(cfg))


sweep_app = typer.Typer(help="Inspect sweep directories (posx train -m).", no_args_is_help=True)
app.add_typer(sweep_app, name="sweep")


@sweep_app.command("status")
def sweep_status(
    sweep_dir: Path = typer.Argument(..., help="A sweep directory (has multirun.yaml)."),
) -> None:
    """Which jobs of a sweep finished, failed, are incomplete or never started."""
    from rich.markup import escape
    from rich.table import Table

    from posx.sweeps import sweep_status as status_of

    jobs = status_of(sweep_dir)
    colour = {"finished": "green", "failed": "red", "incomplete": "yellow", "damaged": "red",
              "missing": "magenta"}  # fmt: skip
    table = Table(title=str(sweep_dir), title_justify="left")
    for col in ("#", "swept values", "status", "run", "detail"):
        table.add_column(col)
    for job in jobs:
        swept = " ".join(f"{k}={v}" for k, v in job.swept.items())
        table.add_row(
            str(job.number),
            escape(swept),
            f"[{colour[job.status]}]{job.status}[/]",
            job.run_dir.name if job.run_dir else "—",
            escape(job.detail),
        )
    console.print(table)
    counts = {s: sum(j.status == s for j in jobs) for s in colour}
    console.print(", ".join(f"{n} {s}" for s, n in counts.items() if n) + f" of {len(jobs)} jobs")


def main() -> None:
    """Console entry point: every error is one ``posx: error:`` line on stderr and an exit code.

    Typer runs without its standalone mode, so its own usage errors (an unknown option, ``--window
    abc``) reach this function as click exceptions instead of a usage box.
    """
    warnings.simplefilter("always", PosxWarning)  # a skipped file is news every time
    previous = warnings.showwarning
    warnings.showwarning = _show_warning(previous)
    try:
        code = app(prog_name="posx", standalone_mode=False)
    except PosxError as err:
        if debug_requested():
            traceback.print_exc()
        _error(str(err))
        sys.exit(err.exit_code)
    except typer.TyperException as err:  # click's usage errors: a bad option value, ...
        if type(err).__name__ == "NoArgsIsHelpError":  # `posx` or `posx sweep` alone: the help
            console.print(err.format_message(), markup=False, highlight=False)
            sys.exit(2)
        if debug_requested():
            traceback.print_exc()
        ctx = getattr(err, "ctx", None)
        where = ctx.command_path if ctx is not None else "posx COMMAND"
        hint = f"; see `{where} --help`"
        _error(" ".join(err.format_message().split()).rstrip(".") + hint)
        sys.exit(2)
    except (KeyboardInterrupt, typer.Abort):
        err_console.print("posx: interrupted", markup=False)
        sys.exit(130)
    finally:
        warnings.showwarning = previous
    if code == 130:  # typer turns a Ctrl-C outside any command's own handling into Exit(130)
        err_console.print("posx: interrupted", markup=False)
    if isinstance(code, int) and code:
        sys.exit(code)


def _error(message: str) -> None:
    err_console.print(f"posx: error: {message}", markup=False, highlight=False, soft_wrap=True)


def _show_warning(previous: Callable[..., None]) -> Callable[..., None]:
    """``posx: warning: MESSAGE`` for posx's own warnings (e.g. a damaged table that a report
    skips); any other warning as Python shows it."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        if issubclass(category, PosxWarning):
            err_console.print(f"posx: warning: {message}", markup=False, highlight=False,
                              soft_wrap=True)  # fmt: skip
        else:
            previous(message, category, filename, lineno, file, line)

    return show
