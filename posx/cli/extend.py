"""posx extend: context extension by fine-tuning a trained run (posx/runs/extend.py)."""

from __future__ import annotations

from pathlib import Path

import typer

from posx.cli._app import PASS_THROUGH, app, config_dirs, debug_requested
from posx.cli.options import TRUST_HELP
from posx.errors import ConfigError


@app.command(context_settings=PASS_THROUGH)
def extend(
    ctx: typer.Context,
    run: Path = typer.Argument(
        ...,
        help="A trained run to start from (its final weights), or a sweep or results root: "
        "every run in it trained from scratch.",
    ),
    trust: list[str] = typer.Option(None, "--trust", help=TRUST_HELP),
) -> None:
    """Fine-tune a trained run to a longer context: a new run from RUN's final weights, with
    RUN's config and these overrides on top (-m for sweeps), a fresh optimizer and schedule.

    Examples: `posx extend RUN extension=yarn`, `posx extend RUN train.length=256
    encoding.scaling.type=linear encoding.scaling.factor=4`,
    `posx extend -m ROOT extension=pi,ntk,yarn,pose,plain,control` (docs/context_extension.md).
    """
    from posx.config.trust import trusted_prefixes
    from posx.runs.extend import run_extend

    dirs = config_dirs(ctx)
    run, args = _run_and_args(str(run), list(ctx.args))
    run_extend(run, args, debug_requested(), dirs=dirs, trust=trusted_prefixes(trust, dirs))


def _run_and_args(first: str, rest: list[str]) -> tuple[Path, list[str]]:
    """RUN and the arguments after it: in ``posx extend -m RUN ...`` click takes ``-m`` for
    RUN, so RUN is the first word that is neither a flag nor an override."""
    words = [first, *rest]
    for i, word in enumerate(words):
        if not word.startswith("-") and "=" not in word:
            return Path(word), words[:i] + words[i + 1 :]
    raise ConfigError("posx extend needs RUN, a trained run directory (or a root of runs)")
