"""posx list, show-config and sweep status: what can be chosen, what would run, what ran."""

from __future__ import annotations

from pathlib import Path

import typer

from posx.cli._app import PASS_THROUGH, app, config_dirs, console, write_out
from posx.errors import ConfigError


@app.command("list")
def list_(
    ctx: typer.Context,
    group: str = typer.Argument(
        None, help="encoding, task, model, train, eval, positions, logger or experiment."
    ),
    name: str = typer.Argument(None, help="An option of GROUP: its description in full."),
) -> None:
    """Show the options of each config group, one line each; your own (from --config-dir or
    POSX_CONFIG_PATH) are marked with their directory.

    `posx list GROUP NAME` shows one option's description in full, e.g.
    `posx list experiment arithmetic`.
    """
    from posx.config.paths import GROUPS, options

    if group is not None and group not in GROUPS:  # "encodings" means "encoding"
        group = group.rstrip("s") if group.rstrip("s") in GROUPS else group
    if group is not None and group not in GROUPS:
        raise ConfigError(f"unknown group {group!r}; choose from: {', '.join(GROUPS)}")
    dirs = config_dirs(ctx)
    if name is not None:
        if name not in options(group, dirs):
            found = ", ".join(sorted(options(group, dirs)))
            raise ConfigError(f"{group} has no option {name!r}; choose from: {found}")
        _show_option(group, name, dirs)
        return
    for g in [group] if group else GROUPS:
        _list_group(g, dirs)
    console.print("one option in full: posx list GROUP NAME", style="dim", markup=False,
                  highlight=False, soft_wrap=True)  # fmt: skip


def _list_group(group: str, dirs: list[Path]) -> None:
    """One line per option of ``group``: its name, its description cut to the terminal's width
    (``…`` where cut) and, with the user's config dirs, where it comes from."""
    from rich.text import Text

    from posx.config.paths import CONFIG_DIR, describe_option, options

    found = sorted(options(group, dirs).items())
    console.print(f"{group} (choose with {group}=NAME)", style="bold", markup=False,
                  highlight=False)  # fmt: skip
    width = max(len(n) for n, _ in found)
    for name, path in found:
        source = ""
        if dirs:  # where a user's option comes from; built-in ones say so
            source = "posx" if path.is_relative_to(CONFIG_DIR) else str(path.parent.parent)
        room = console.width - width - 4 - (len(source) + 2 if source else 0)
        line = Text("  ")
        line.append(name.ljust(width), style="bold cyan")
        line.append("  " + fit(describe_option(group, name, dirs), room))
        if source:
            line.append("  " + source, style="magenta")
        console.print(line, soft_wrap=True, highlight=False)


def fit(text: str, room: int) -> str:
    """``text`` when it fits in ``room`` characters, else its words that fit and ``…``."""
    if len(text) <= room:
        return text
    cut = text[: max(room - 1, 0)]
    if " " in cut and not text[len(cut)].isspace():
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,;:") + "…"


def _show_option(group: str, name: str, dirs: list[Path]) -> None:
    """``posx list GROUP NAME``: the option's description as its yaml writes it, and where the
    yaml is."""
    from posx.config.paths import option_comment, options

    console.print(f"{group}={name}", style="bold cyan", markup=False, highlight=False)
    console.print(str(options(group, dirs)[name]), style="dim", markup=False, highlight=False,
                  soft_wrap=True)  # fmt: skip
    for line in option_comment(group, name, dirs):
        console.print(line, markup=False, highlight=False)


@app.command("show-config", context_settings=PASS_THROUGH)
def show_config(ctx: typer.Context) -> None:
    """Print the composed config for the given overrides (what `posx train` would run)."""
    from omegaconf import OmegaConf

    from posx.config.compose import compose
    from posx.runs.overrides import one_config_overrides

    dirs = config_dirs(ctx)
    cfg = compose(one_config_overrides("show-config", ctx.args, dirs), dirs)
    write_out(OmegaConf.to_yaml(cfg))


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
    names = [len(job.run_dir.name) for job in jobs if job.run_dir]
    # the run name is the field one copies: never cut. Where it leaves too little room for the
    # other columns (status, swept values), each job is a block of lines instead of a row.
    if console.width < max(names, default=0) + 40:
        console.print(str(sweep_dir), markup=False, highlight=False, soft_wrap=True)
        for job in jobs:
            swept = " ".join(f"{k}={v}" for k, v in job.swept.items())
            console.print(f"{job.number}  [{colour[job.status]}]{job.status}[/]  {escape(swept)}")
            for text in (job.run_dir.name if job.run_dir else "", job.detail):
                if text:
                    console.print(f"   {text}", markup=False, highlight=False, soft_wrap=True)
    else:
        table = Table(title=str(sweep_dir), title_justify="left")
        for col in ("#", "swept values", "status", "run", "detail"):
            if col == "run":
                table.add_column(col, no_wrap=True, min_width=max(names, default=1))
            else:
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
