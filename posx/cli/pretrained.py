"""``posx eval hf:NAME_OR_DIR`` and ``posx eval -m hf=A,B``: the pretrained-model branch of
``posx eval`` (posx/cli/runs.py dispatches here, and this module never imports it back; the
work is posx/pretrained)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from posx.cli._app import config_dirs, console, err_console
from posx.cli.options import buckets as parse_buckets
from posx.cli.options import parse_lengths, warn
from posx.errors import ConfigError


@dataclass
class HfOptions:
    """The ``posx eval`` options that apply to ``hf:`` models only."""

    variant: list[str] | None
    passkey: bool
    trust_remote_code: list[str] | None
    allow_download: bool
    revision: str | None
    dtype: str
    device_map: str | None
    suite: str | None = None


def eval_pretrained(
    ctx: typer.Context,
    runs: list[Path],
    lengths: str | None,
    root: Path,
    device: str,
    protocol: tuple[str | None, int | None, int | None, str | None],
    progress: bool,
    max_memory: str | None,
    hf: HfOptions,
) -> None:
    """``posx eval hf:NAME_OR_DIR ...``: one pretrained model per ``hf:`` word, each its own run
    under ``ROOT/pretrained/``."""
    from posx.pretrained.evaluate import Settings
    from posx.pretrained.request import Request, parse_suites, parse_values
    from posx.pretrained.run import evaluate_pretrained, progress_line
    from posx.pretrained.scaling import parse_variant
    from posx.pretrained.track import chosen_loggers, is_logger_word
    from posx.report.ruler import ruler_table
    from posx.runs.messages import eval_table
    from posx.runs.sizes import parse_size
    from posx.runtime.distributed import world

    words = [str(r) for r in runs]
    overrides = [w for w in [*words, *ctx.args] if "=" in w and not w.startswith("hf:")]
    models = [w for w in words if w.startswith("hf:")]
    other = [w for w in [*words, *ctx.args] if w not in overrides and w not in models]
    if other:
        raise ConfigError(
            f"evaluate pretrained models and posx runs in separate commands (got {other[0]} "
            "beside hf:...)"
        )
    mode, window, stride, buckets = protocol
    if mode not in (None, "full", "sliding"):
        raise ConfigError(f"unknown --mode {mode!r}; choose from full, sliding")
    trackers = chosen_loggers([w for w in overrides if is_logger_word(w)], config_dirs(ctx))
    values = parse_values([w for w in overrides if not is_logger_word(w)])
    asked = parse_lengths(lengths) if lengths is not None else None
    variants = [parse_variant(v) for v in hf.variant or ["none"]]
    limit = parse_size(max_memory, "--max-memory")
    suites = parse_suites(hf.suite)
    _check_suite_options(suites, protocol, overrides)
    main = world().is_main
    for word in models:
        settings = Settings(
            lengths=asked or [],
            mode=mode or "full",
            window=window,
            stride=stride,
            tokens=values["eval.tokens"],
            batch_tokens=values["eval.batch_tokens"],
            buckets=parse_buckets(buckets),
            variants=variants,
        )
        request = Request(
            word, settings, values, hf.passkey, root, device, hf.dtype, hf.device_map,
            list(hf.trust_remote_code or []), hf.revision, hf.allow_download, limit, trackers,
            suites=suites,
        )  # fmt: skip

        def line(task: str, row: dict, word: str = word) -> None:
            if progress and main:
                err_console.print(progress_line(word, task, row), markup=False, highlight=False,
                                  soft_wrap=True)  # fmt: skip

        run, rows = evaluate_pretrained(request, line, warn)
        if not main:  # under torchrun the first process reports
            continue
        console.print(str(run), style="bold", markup=False, highlight=False, soft_wrap=True)
        for text in ruler_table(rows, values["ruler.threshold"]):
            console.print(text, markup=False, highlight=False, soft_wrap=True)
        rows = [r for r in rows if not str(r["task"]).startswith("ruler/")]
        for task, what in dict.fromkeys((r["task"], r["overrides"]) for r in rows):
            group = [r for r in rows if (r["task"], r["overrides"]) == (task, what)]
            console.print(f"{task} {what or '(as saved)'}", markup=False, highlight=False)
            for text in eval_table(group, group[0]["train_length"]):
                console.print(text, markup=False, highlight=False, soft_wrap=True)
    if main:
        console.print("compare with `posx report` (docs/pretrained.md)")


def _check_suite_options(
    suites: tuple[str, ...], protocol: tuple[Any, ...], overrides: list[str]
) -> None:
    """Refuses options the chosen suites would ignore (a number must never look as if an option
    had shaped it).

    Raises:
        ConfigError: ``--mode``/``--window``/``--stride``/``--buckets`` without ``--suite text``,
            or a ``ruler.*`` setting without ``--suite ruler``.
    """
    if "text" not in suites and any(v is not None for v in protocol):
        raise ConfigError(
            "--mode, --window, --stride and --buckets apply to --suite text (perplexity); "
            "RULER's prompts are read whole"
        )
    ruler = [w.split("=", 1)[0] for w in overrides if w.startswith("ruler.")]
    if ruler and "ruler" not in suites:
        raise ConfigError(f"{ruler[0]} applies to RULER's tasks: add --suite ruler (or text,ruler)")


def _quoted(text: str) -> str:
    """A value as a quoted Hydra override string (a path or ``yarn:4`` stays one value)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sweep_pretrained(
    ctx: typer.Context,
    runs: list[Path] | None,
    lengths: str | None,
    root: Path,
    device: str,
    protocol: tuple[str | None, int | None, int | None, str | None],
    max_memory: str | None,
    hf: HfOptions,
) -> None:
    """``posx eval -m hf=A,B ...`` (or ``-m hf:A hf:B``): pretrained models as a Hydra sweep of
    ``configs/pretrained.yaml``; the options become its overrides."""
    from posx.pretrained.sweep import run_sweep

    words = [w for w in [*map(str, runs or []), *ctx.args] if w not in ("-m", "--multirun")]
    models = [w[3:] for w in words if w.startswith("hf:")]
    overrides = [w for w in words if "=" in w and not w.startswith("hf:")]
    other = [w for w in words if w not in overrides and not w.startswith("hf:")]
    if other:
        raise ConfigError(
            "posx eval -m sweeps pretrained models (hf=NAME_A,NAME_B key=value ...); got "
            + other[0]
        )
    mode, window, stride, buckets = protocol
    given = {
        "hf": ",".join(map(_quoted, models)) if models else None,
        "eval.lengths": f"[{','.join(map(str, parse_lengths(lengths)))}]" if lengths else None,
        "eval.mode": mode, "eval.window": window, "eval.stride": stride, "eval.buckets": buckets,
        "eval.variants": f"[{','.join(map(_quoted, hf.variant))}]" if hf.variant else None,
        "eval.passkey": "true" if hf.passkey else None,
        "eval.suite": _quoted(hf.suite) if hf.suite else None,
        "trust_remote_code": f"[{','.join(map(_quoted, hf.trust_remote_code))}]"
        if hf.trust_remote_code else None,
        "allow_download": "true" if hf.allow_download else None,
        "revision": hf.revision and _quoted(hf.revision), "device_map": hf.device_map,
        "dtype": hf.dtype, "device": device, "max_memory": max_memory,
        "root": _quoted(str(root)),
    }  # fmt: skip
    keys = {w.split("=", 1)[0].lstrip("+") for w in overrides}
    options = [f"{k}={v}" for k, v in given.items() if v is not None and k not in keys]
    run_sweep([*options, *overrides], config_dirs(ctx))
