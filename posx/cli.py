"""posx command line: train, eval, report, list, show-config. Parses, then calls."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

import typer
from rich.console import Console

from posx.errors import ConfigError, PosxError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Length-extrapolation experiments: train at one length, evaluate at many, compare.",
)
console = Console()
err_console = Console(stderr=True)
PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors.")) -> None:
    if debug:
        import os

        os.environ["POSX_DEBUG"] = "1"


@app.command(context_settings=PASS_THROUGH)
def train(ctx: typer.Context) -> None:
    """Train one model; arguments are Hydra overrides (-m for sweeps, --cfg job to print).

    Examples: `posx train encoding=alibi task=copy train.steps=500`,
    `posx train -m encoding=nope,rope,alibi seed=0,1,2`. See `posx list` for the options.
    """
    from posx.launch import run_train

    run_train(list(ctx.args))


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
) -> None:
    """Evaluate trained runs at longer lengths; writes each run's eval.csv.

    Extra `key=value` arguments override the run's config at evaluation time
    (e.g. `encoding.base=40000`) and are recorded in every row.
    """
    from posx.evaluate import evaluate_run
    from posx.results import checkpoint_dir, find_runs, run_config

    overrides = [a for a in ctx.args if "=" in a]
    stray = [a for a in ctx.args if "=" not in a]
    # typer puts key=value words into `runs` when they come after the run dirs
    overrides += [str(r) for r in runs or [] if "=" in str(r) and not Path(r).exists()]
    named = [r for r in runs or [] if str(r) not in overrides]
    if stray:
        raise ConfigError(
            f"unexpected argument(s) {' '.join(stray)}; overrides look like key=value"
        )
    asked = parse_lengths(lengths) if lengths else None
    if named:
        for run in named:
            run_config(run)
            checkpoint_dir(run)
        targets = named
    else:
        targets = []
        for run in find_runs(root):
            try:
                checkpoint_dir(run)
                targets.append(run)
            except PosxError:
                err_console.print(f"[yellow]skipping {run}: no checkpoint[/]")
        if not targets:
            raise ConfigError(f"no trained runs under {root}; run `posx train` first")
    for run in targets:
        run_lengths = asked or list(run_config(run).eval.lengths)
        rows = evaluate_run(run, run_lengths, overrides, device=device)
        cells = "  ".join(
            f"L={r['eval_length']}: {r['loss']:.3f}"
            if r["status"] == "ok"
            else f"L={r['eval_length']}: {r['status']}"
            for r in rows
        )
        console.print(f"[bold]{run.name}[/] loss  {cells}")
    console.print(f"wrote eval.csv in {len(targets)} run(s); compare with `posx report`")


@app.command()
def report(
    root: Path = typer.Option(
        Path("results"), "--root", help="Results root (every eval.csv below it)."
    ),
    metric: str = typer.Option(
        "auto", "--metric", help="auto, loss, ppl, bpb, acc or exact_match."
    ),
    fmt: str = typer.Option("rich", "--format", help="rich, md or csv."),
    output: Path = typer.Option(None, "--output", "-o", help="Write the table to this file."),
) -> None:
    """Compare encodings across eval lengths: mean ± std over seeds, best per column marked."""
    from posx.report import pick_metric, pivot, summarize, to_markdown, to_rich
    from posx.results import atomic_write, load_evals

    if fmt not in ("rich", "md", "csv"):
        raise ConfigError(f"unknown --format {fmt!r}; choose from rich, md, csv")
    frame = load_evals(root)
    summary = summarize(frame, pick_metric(frame, metric))
    if fmt == "csv":
        text = summary.to_csv(index=False)
    elif fmt == "md" or output is not None:
        text = to_markdown(pivot(summary))
    if fmt == "rich":
        for table in to_rich(pivot(summary)):
            console.print(table)
    if output is not None:
        atomic_write(output, text)
        console.print(f"wrote {output}")
    elif fmt != "rich":
        sys.stdout.write(text)


@app.command("list")
def list_(
    group: str = typer.Argument(None, help="encoding, task, model, train, eval or experiment."),
) -> None:
    """Show the available options of each config group with their descriptions."""
    from rich.table import Table

    from posx.config import GROUPS, choices, describe_option

    if group is not None and group.rstrip("s") not in GROUPS:
        raise ConfigError(f"unknown group {group!r}; choose from: {', '.join(GROUPS)}")
    for g in [group.rstrip("s")] if group else GROUPS:
        table = Table(title=f"{g} (choose with {g}=NAME)", title_justify="left", show_header=False)
        table.add_column(style="bold cyan")
        table.add_column()
        for name in choices(g):
            table.add_row(name, describe_option(g, name))
        console.print(table)


@app.command("show-config", context_settings=PASS_THROUGH)
def show_config(ctx: typer.Context) -> None:
    """Print the composed config for the given overrides (what `posx train` would run)."""
    from omegaconf import OmegaConf

    from posx.launch import compose_config

    cfg = compose_config(list(ctx.args))
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
    colour = {"finished": "green", "failed": "red", "incomplete": "yellow", "missing": "magenta"}
    table = Table(title=str(sweep_dir), title_justify="left")
    for col in ("#", "swept values", "status", "run", "detail"):
        table.add_column(col)
    for job in jobs:
        swept = " ".join(f"{k}={v}" for k, v in job.swept.items())
        table.add_row(str(job.number), escape(swept), f"[{colour[job.status]}]{job.status}[/]",
                      job.run_dir.name if job.run_dir else "—", escape(job.detail))
    console.print(table)
    counts = {s: sum(j.status == s for j in jobs) for s in colour}
    console.print(", ".join(f"{n} {s}" for s, n in counts.items() if n) + f" of {len(jobs)} jobs")


def main() -> None:
    """Console entry point: PosxErrors become one line on stderr and an exit code."""
    from posx.launch import debug_enabled

    try:
        app()
    except PosxError as err:
        if debug_enabled():
            traceback.print_exc()
        err_console.print(f"posx: error: {err}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        err_console.print("posx: interrupted", markup=False)
        sys.exit(130)
