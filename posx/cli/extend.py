"""posx extend: context extension by fine-tuning a trained run (posx/runs/extend/run.py)."""

from __future__ import annotations

from pathlib import Path

import typer

from posx.cli._app import PASS_THROUGH, app, config_dirs, debug_requested
from posx.cli.options import TRUST_HELP, check_misspelt_options
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
    dry_run: bool = typer.Option(
        False, "--dry-run", help="hf: models: print the plan and its memory estimate, and exit."
    ),
    allow_download: bool = typer.Option(
        False, "--allow-download", help="hf: models: download a model missing from the cache."
    ),
    revision: str = typer.Option(
        None, "--revision", help="hf: models: a hub branch, tag or commit."
    ),
    trust_remote_code: list[str] = typer.Option(
        None, "--trust-remote-code", help="hf: models: let this model (NAME or DIR) run its code."
    ),
) -> None:
    """Fine-tune a trained run to a longer context: a new run from RUN's final weights, with
    RUN's config and these overrides on top (-m for sweeps), a fresh optimizer and schedule.

    Examples: `posx extend RUN extension=yarn`, `posx extend RUN train.length=256
    encoding.scaling.type=linear encoding.scaling.factor=4`,
    `posx extend -m ROOT extension=pi,ntk,yarn,pose,plain,control` (docs/context_extension.md).
    `posx extend hf:NAME_OR_DIR extension=yarn extend.factor=4` fine-tunes a pretrained Hugging
    Face model instead, on one process or under torchrun with FSDP (docs/pretrained.md).
    """
    check_misspelt_options(ctx)
    if str(run).startswith("hf:"):
        from posx.cli.extend_pretrained import extend_hf
        from posx.pretrained.extend.settings import Options

        options = Options(dry_run, allow_download, revision, list(trust_remote_code or []),
                          config_dirs(ctx))  # fmt: skip
        extend_hf(str(run), list(ctx.args), options)
        return
    from posx.config.trust import trusted_prefixes
    from posx.runs.extend.run import run_extend

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
