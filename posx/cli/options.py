"""Option values that more than one command reads (``--lengths``, ``--buckets``) and the warning
line they print: shared here so that command modules never import each other's helpers."""

from __future__ import annotations

import difflib

import typer

from posx.cli._app import err_console
from posx.errors import ConfigError

TRUST_HELP = (
    "Also build _target_ classes under this module prefix (e.g. mypkg) when loading runs; "
    "repeatable; adds to POSX_TRUST (comma-separated). posx's own classes, and the _target_s "
    "in your config dirs (--config-dir, POSX_CONFIG_PATH), are always trusted."
)


def parse_lengths(text: str) -> list[int]:
    """The ``--lengths`` option (``512,1024,2048``) as a list of positive integers.

    Raises:
        ConfigError: A part that is not an integer, or a length that is not positive.
    """
    from posx.config.validate import positive_lengths

    values: list[int] = []
    for part in text.split(","):
        try:
            values.append(int(part.strip()))
        except ValueError as err:
            raise ConfigError(
                f"--lengths must be comma-separated positive integers, got {part!r}"
            ) from err
    return positive_lengths(values, "--lengths")


def buckets(spec: str | None) -> str | int:
    """``--buckets``: ``log`` (default) or a width in tokens."""
    from posx.config.validate import parse_buckets

    return parse_buckets(spec) if spec is not None else "log"


def warn(text: str) -> None:
    """``posx: warning: TEXT`` on stderr."""
    err_console.print(f"posx: warning: {text}", markup=False, style="yellow", soft_wrap=True)


def check_misspelt_options(ctx: typer.Context) -> None:
    """Refuses a word passed through to Hydra or the settings that is a near miss of one of the
    command's own options: ``--dryrun`` -> did you mean ``--dry-run``.

    Raises:
        ConfigError: One line naming the option meant.
    """
    own = [o for p in ctx.command.params for o in p.opts if o.startswith("--")]
    for word in ctx.args:
        name = word.split("=", 1)[0]
        if not name.startswith("--") or name in own:
            continue
        close = difflib.get_close_matches(name, own, n=1, cutoff=0.8)
        if close:
            raise ConfigError(
                f"posx {ctx.info_name} has no option {name}; did you mean {close[0]}?"
            )
