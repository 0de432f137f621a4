"""posx list, show-config and sweep status: what can be chosen, what would run, what ran."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from posx.cli._app import PASS_THROUGH, app, config_dirs, console
from posx.errors import ConfigError


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

    from posx.config.paths import CONFIG_DIR, GROUPS, describe_option, options

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

    from posx.config.compose import compose
    from posx.runs.overrides import one_config_overrides

    dirs = config_dirs(ctx)
    cfg = compose(one_config_overrides("show-config", ctx.args, dirs), dirs)
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

    from posx.runs.sweeps import sweep_status as status_of

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
