"""posx train, resume, runs, eval."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from posx.cli._app import (
    PASS_THROUGH,
    app,
    config_dirs,
    console,
    debug_requested,
    err_console,
    terminal_width,
    write_out,
)
from posx.cli.options import TRUST_HELP, check_misspelt_options, parse_lengths, warn
from posx.errors import ConfigError, PosxError

if TYPE_CHECKING:  # the commands import what they run only when they run
    from posx.saved import SavedRun


@app.command(context_settings=PASS_THROUGH)
def train(ctx: typer.Context) -> None:
    """Train one model; arguments are Hydra overrides (-m for sweeps, --cfg job to print).

    Examples: `posx train encoding=alibi task=copy train.steps=500`,
    `posx train -m encoding=nope,rope,alibi seed=0,1,2`. See `posx list` for the options.
    """
    from posx.runs import run_train

    run_train(list(ctx.args), debug=debug_requested(), dirs=config_dirs(ctx))


@app.command()
def resume(
    ctx: typer.Context,
    run: Path = typer.Argument(..., help="A run directory with a checkpoint."),
    trust: list[str] = typer.Option(None, "--trust", help=TRUST_HELP),
) -> None:
    """Continue an interrupted run from its last checkpoint (same config, same directory)."""
    from posx.cli.extend_pretrained import extension_info, resume_hf
    from posx.config.trust import trusted_prefixes
    from posx.runs import run_resume

    dirs = config_dirs(ctx)
    info = extension_info(run)
    if info is not None:  # a pretrained model's extension (posx extend hf:...)
        resume_hf(run, info, dirs)
        return
    run_resume(run, debug=debug_requested(), dirs=dirs, trust=trusted_prefixes(trust, dirs))


@app.command("runs")
def runs_(
    root: Path = typer.Option(Path("results"), "--root", help="Results root to list runs under."),
    fmt: str = typer.Option(
        "table",
        "--format",
        "-f",
        help="table, or json: a list of objects with the table's fields as plain values "
        "(steps as steps_done and steps_total, null where unknown), for scripts.",
    ),
) -> None:
    """One line per run: status, encoding, task, model, training length, steps, seed, final
    loss, evaluated lengths and its directory."""
    from posx.runs.listing import format_runs, list_runs, runs_json

    if fmt not in ("table", "json"):
        raise ConfigError(f"unknown --format {fmt!r}; choose from table, json")
    found = list_runs(root)
    if fmt == "json":  # an empty list, not a sentence: a script reads it either way
        write_out(runs_json(found) + "\n")
        return
    if not found:
        console.print(f"no runs under {root}; start one with `posx train`", soft_wrap=True)
        return
    write_out("\n".join(format_runs(found, terminal_width())) + "\n")


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
    variant: list[str] = typer.Option(
        None,
        "--variant",
        help="A RoPE scaling, TYPE:FACTOR (yarn:4, linear:2, ntk:4, dynamic_ntk:2, llama3:8), "
        "Self-Extend selfextend:G,W (group size, neighbour window) or none; repeatable "
        "(default: none). On hf: models and on posx RoPE runs.",
    ),
    passkey: bool = typer.Option(
        False, "--passkey", help="hf: models: also score zero-shot passkey retrieval per depth."
    ),
    trust_remote_code: list[str] = typer.Option(
        None,
        "--trust-remote-code",
        help="hf: models: let this model (its NAME or DIR) run "
        "the code its config asks for; never done otherwise.",
    ),
    allow_download: bool = typer.Option(
        False,
        "--allow-download",
        help="hf: models: download a model missing from the local "
        "cache (never while HF_HUB_OFFLINE is set).",
    ),
    revision: str = typer.Option(
        None, "--revision", help="hf: models: a hub branch, tag or commit."
    ),
    dtype: str = typer.Option(
        "auto", "--dtype", help="hf: models: auto (bf16 on a GPU, fp32 on a CPU), fp32, bf16, fp16."
    ),
    device_map: str = typer.Option(
        None,
        "--device-map",
        help="hf: models: accelerate's device map, e.g. auto (spread a "
        "model over the GPUs of this machine).",
    ),
    suite: str = typer.Option(
        None,
        "--suite",
        help="hf: models: text (perplexity, the default), ruler (RULER's 11 tasks; "
        "ruler.tasks=, ruler.samples=) or text,ruler.",
    ),
) -> None:
    """Evaluate trained runs at longer lengths; writes eval.csv and eval_positions.csv.

    Extra `key=value` arguments override the run's config at evaluation time
    (e.g. `encoding.base=40000`) and are recorded in every row, as are --mode, --window and
    --stride (in their own columns); `eval.lengths=[512,1024]` is the same as --lengths.
    `posx eval hf:NAME_OR_DIR` evaluates a pretrained Hugging Face causal LM instead
    (docs/pretrained.md; `logger=tensorboard` sends its rows to a tracker), and
    `posx eval -m hf=NAME_A,NAME_B ... [hydra/launcher=slurm]` runs several as a Hydra sweep.
    """
    from posx.cli.extend_pretrained import extend_hf_runs
    from posx.cli.pretrained import HfOptions, eval_pretrained, sweep_pretrained

    check_misspelt_options(ctx)
    hf_options = (passkey, trust_remote_code, allow_download, revision, device_map, suite)
    hf = HfOptions(variant, passkey, trust_remote_code, allow_download, revision, dtype,
                    device_map, suite)  # fmt: skip
    if {"-m", "--multirun"} & {*ctx.args, *map(str, runs or [])}:
        sweep_pretrained(ctx, runs, lengths, root, device, (mode, window, stride, buckets),
                          max_memory, hf)  # fmt: skip
        return
    if any(str(r).startswith("hf:") for r in runs or []):
        eval_pretrained(ctx, runs, lengths, root, device, (mode, window, stride, buckets),
                         progress, max_memory, hf)  # fmt: skip
        return
    words = [*map(str, runs or []), *ctx.args]
    named = [r for r in runs or [] if "=" not in str(r)]
    opened = extend_hf_runs(named, lengths, suite, [w for w in words if "=" in w])
    if opened is None:
        return
    if any(hf_options) or dtype != "auto":
        raise ConfigError(
            "--passkey, --trust-remote-code, --allow-download, --revision, --dtype, "
            "--device-map and --suite apply to pretrained models (posx eval hf:NAME_OR_DIR); a "
            "posx run is scaled with --variant or encoding.scaling.* overrides"
        )
    named, asked, overrides = _eval_inputs(ctx, runs, lengths, (mode, window, stride, buckets))
    variants = _run_variants(variant)
    # torch comes with evaluating: a mistyped option or run is answered before it is imported
    from posx.config.trust import trusted_prefixes
    from posx.runs.sizes import parse_size

    limit = parse_size(max_memory, "--max-memory")
    trusted = trusted_prefixes(trust, config_dirs(ctx))
    by_path = {run.path: run for run in opened}  # already open: its files are read once
    named = [by_path.get(Path(r), r) for r in named]
    _check_variants_fit(named, variants)
    for text, extra in variants:
        _eval_posx_runs(named, root, asked, overrides + extra, (text, device, progress, trusted,
                        limit))  # fmt: skip


def _run_variants(variant: list[str] | None) -> list[tuple[str, list[str]]]:
    """``--variant`` words on posx runs as ``(word, overrides)`` (``[("", [])]`` without any):
    each evaluated in turn, its rows carrying the overrides (``yarn:4`` is
    ``encoding.scaling.factor=4.0 encoding.scaling.type=yarn``)."""
    from posx.pretrained.scaling import parse_variant

    if not variant:
        return [("", [])]
    return [(text, parse_variant(text).overrides.split()) for text in variant]


def _check_variants_fit(named: list, variants: list[tuple[str, list[str]]]) -> None:
    """Every ``--variant`` fits every named run before any is evaluated (nothing is written for
    one when another will be refused)."""
    from posx.runs.variants import scaling_refusal
    from posx.saved import SavedRun

    for run in [SavedRun.of(r) for r in named]:
        if not run.has_checkpoint():
            continue  # said as the run's own problem by the selection
        for text, extra in variants:
            why = scaling_refusal(run, text) if extra else ""
            if why:
                raise ConfigError(why)


def _eval_posx_runs(
    named: list,
    root: Path,
    asked: list[int] | None,
    overrides: list[str],
    how: tuple[str, str, bool, list[str], int | None],
) -> None:
    """``posx eval`` of posx's own runs under one set of ``overrides`` (one ``--variant``, or
    none: ``how[0]`` is its word, ``""``), then the failures, as one command's."""
    from posx.runs import evaluate_runs, select_runs
    from posx.runs.evaluation import failures
    from posx.runs.variants import scaling_refusal

    text, device, progress, trusted, limit = how

    scaled = bool(text) and text.strip() not in ("none", "base")

    def fits(run: SavedRun) -> str:
        return scaling_refusal(run, text) if scaled else ""

    chosen = select_runs(named, root, overrides, trusted, fits)
    for run, why in chosen.skipped:
        err_console.print(f"[yellow]skipping {run.path}: {why}[/]")
    for _, why in chosen.damaged:
        err_console.print(f"posx: skipping: {why}", markup=False, style="red", soft_wrap=True)

    done = evaluate_runs(
        chosen.runs, asked, overrides, device, progress, on_run=_show_eval, on_warning=warn,
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


def _eval_inputs(
    ctx: typer.Context,
    runs: list[Path] | None,
    lengths: str | None,
    protocol: tuple[str | None, int | None, int | None, str | None],
) -> tuple[list[Path], list[int] | None, list[str]]:
    """``posx eval``'s words sorted out: the runs named, the lengths asked for (``--lengths`` or
    ``eval.lengths=[...]``) and the eval-time overrides (``--mode`` ... as ``eval.*`` ones).

    Raises:
        ConfigError: A word that is not a run (a results root, a sweep, a checkpoint folder,
            an option, ``hf:NAME``) or an override that cannot apply, said as what it is.
    """
    from posx.runs.overrides import eval_lengths_override, protocol_overrides
    from posx.runs.targets import explain_run_argument

    overrides = protocol_overrides(*protocol)
    overrides += [a for a in ctx.args if "=" in a]
    stray = [a for a in ctx.args if "=" not in a]
    # typer puts key=value words into `runs` when they come after the run dirs
    overrides += [str(r) for r in runs or [] if "=" in str(r) and not Path(r).exists()]
    named = [r for r in runs or [] if str(r) not in overrides]
    for word in [*map(str, named), *stray]:
        problem = explain_run_argument(word)
        if problem:
            raise ConfigError(problem)
    if stray:
        raise ConfigError(
            f"unexpected argument(s) {' '.join(stray)}; overrides look like key=value"
        )
    asked = parse_lengths(lengths) if lengths is not None else None
    asked, overrides = eval_lengths_override(overrides, asked)
    return named, asked, overrides


def _show_eval(run: SavedRun, rows: list[dict]) -> None:
    """One run's new eval rows as an aligned table, as training's end-of-run summary shows them:
    the report's metric and unit for the task, ×r relative to the training length."""
    from posx.runs.messages import eval_table

    overrides = {str(r.get("overrides") or "") for r in rows} - {""}
    head = run.name + (f"  ({'; '.join(sorted(overrides))})" if overrides else "")
    console.print(head, style="bold", markup=False, highlight=False, soft_wrap=True)
    for line in eval_table(rows, _train_length(run, rows), _earlier_rows(run)):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _earlier_rows(run: SavedRun) -> list[dict]:
    """The run's ``eval.csv`` rows (its value at the training length gives ×r when this
    evaluation did not include that length); none when it cannot be read."""
    import pandas as pd

    try:
        table = pd.read_csv(run.path / "eval.csv", dtype={"overrides": str})
    except (OSError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return []
    if "overrides" in table:
        table["overrides"] = table["overrides"].fillna("")
    return table.to_dict("records")


def _train_length(run: SavedRun, rows: list[dict]) -> int:
    """The run's training length: every eval row records it; else its saved config's."""
    if rows and rows[0].get("train_length") is not None:
        return int(rows[0]["train_length"])
    return int(run.config.train.length)
