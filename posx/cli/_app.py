"""The Typer application the command modules register on, its consoles and shared options."""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path

import click
import typer
import typer.core
from rich.console import Console


def _flag_without_type(display: Callable[..., str | None]) -> Callable[..., str | None]:
    """Typer's help shows a type beside every option, ``--debug <bool>`` for a flag too, which
    reads as if the flag took a value (``--debug true``): a flag shows none."""

    def shown(self: typer.core.TyperOption, ctx: click.Context) -> str | None:
        return None if self.is_flag else display(self, ctx)

    return shown


typer.core.TyperOption.display_type_rich = _flag_without_type(  # type: ignore[method-assign]
    typer.core.TyperOption.display_type_rich
)

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Length-extrapolation experiments: train at one length, evaluate at many, compare.",
)


class _Console(Console):
    """rich's console, but a reader that stops early (``posx report | head``) is no failure:
    the rest goes nowhere and the command ends with its own exit status (``posx check``'s 1
    still means a claim failed), where rich exits with 1."""

    def on_broken_pipe(self) -> None:
        """Sends the rest of the output to the null device and goes on."""
        self.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self.file.fileno())


console = _Console()
err_console = _Console(stderr=True)


def write_out(text: str) -> None:
    """``text`` on stdout as it is (tables for scripts, JSON, YAML), flushed; a reader that
    stopped early (``| head``) is no failure: the rest goes to the null device."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


def terminal_width() -> int | None:
    """The width lines must fit: the terminal's, or ``COLUMNS``; None when the output goes to a
    file or a pipe with no ``COLUMNS`` (a script reads whole lines there)."""
    if console.is_terminal or os.environ.get("COLUMNS", "").isdigit():
        return console.width
    return None


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
        metavar="DIR",
        help="A directory of your own encoding/, task/, model/, experiment/ ... yamls, added "
        "beside the built-in ones (repeatable; also POSX_CONFIG_PATH=DIR1:DIR2).",
    ),
) -> None:
    """Keeps the ``--config-dir`` directories on the context for the commands.

    ``--debug`` is read by :func:`debug_requested`, which also sees ``POSX_DEBUG``.
    """
    ctx.obj = {"config_dirs": list(config_dir or [])}


def config_dirs(ctx: typer.Context) -> list[Path]:
    """The user's config dirs: ``posx --config-dir DIR ...``, then ``POSX_CONFIG_PATH``."""
    from posx.config.paths import user_config_dirs

    return user_config_dirs((ctx.obj or {}).get("config_dirs", []))


def settle_help(typer_app: typer.Typer) -> None:
    """Each command's help as the terminal should wrap it: Typer's rich help keeps the line
    breaks of a docstring, so a paragraph broke where the source line did (mid-sentence at 80
    columns); here every paragraph is one line, which rich wraps at the terminal's width, and
    ``[...]`` is text, not rich markup. The command list shows the first paragraph."""
    from rich.markup import escape

    for info in [*typer_app.registered_commands, *typer_app.registered_groups]:
        text = info.help or (info.callback.__doc__ if info.callback else None)
        if text is None and isinstance(info, typer.models.TyperInfo) and info.typer_instance:
            text = info.typer_instance.info.help
        if not isinstance(text, str):
            continue
        paragraphs = [" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n")]
        info.help = escape("\n\n".join(p for p in paragraphs if p))
        info.short_help = info.short_help or escape(paragraphs[0])
        if isinstance(info, typer.models.TyperInfo) and info.typer_instance:
            settle_help(info.typer_instance)
