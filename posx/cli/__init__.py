"""posx command line: train, eval, report, check, list, show-config. Parses, then calls.

The commands live by theme (``runs``: train, resume, runs, eval; ``report``: report, check;
``configs``: list, show-config, sweep status) and register on one Typer app (``_app``);
:func:`main` is the console entry point.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
import warnings
from collections.abc import Callable

import typer

from posx.cli._app import app, console, debug_requested, err_console, settle_help
from posx.errors import Interrupted, PosxError, PosxWarning

__all__ = ["app", "console", "err_console", "main"]

# Importing a module registers its commands; `posx --help` lists them in this order.
for _commands in ("runs", "extend", "report", "configs"):
    importlib.import_module(f"posx.cli.{_commands}")
settle_help(app)


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
    except Interrupted as err:  # Ctrl-C, said as training says it: not an error of the input
        err_console.print(f"posx: {err}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(err.exit_code)
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
    except BrokenPipeError:  # a reader that stopped early (`posx runs | head`): no failure
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
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
