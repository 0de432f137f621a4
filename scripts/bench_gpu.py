"""GPU benchmark at a real size: every encoding ÷ a plain decoder, GPT-2-small shape, in 8 minutes.

For each model shape (``gpt2``: 12 layers, d_model 768, 12 heads; ``small``: configs/model/small)
and each encoding, one posx model is built (``train.length`` = the longest training length) and
timed against the plain-PyTorch reference of ``scripts/bench.py`` (SDPA causal, no positions)
in paired calls (:func:`bench.paired_rounds`: a call of the variant, one of the reference, ...):

- **train** at each training length: forward, cross-entropy, backward, clipping, AdamW, with the
  same tokens per step at every length;
- **eval** at each evaluation length: one inference-mode forward of one sequence;
- **peak**: the allocator's peak (the process's RSS on the CPU) of one call per cell, and of one
  forward at the memory base length, for peak(longest) / peak(base).

On CUDA everything runs under bf16 autocast (as ``posx train`` does there). A time budget keeps
the whole run within ``--budget`` seconds: a cell whose calls would not fit (its cost predicted
from the shorter length before it) is a row saying so, not an overrun. On the CPU (or with
``--tiny``) the same code runs with tiny shapes in seconds: that run is the script's test.

Writes ``<out>/bench_gpu.csv`` (one row per cell and round), ``<out>/cells.csv`` (one row per
cell: medians, peaks, targets, met or not) and ``<out>/table.md`` (the table for
docs/performance.md, the device named), and prints the table.

    python scripts/bench_gpu.py                       # CUDA if available, else tiny on the CPU
    python scripts/bench_gpu.py --encodings nope,rope,alibi,fire --budget 120
    python scripts/bench_gpu.py --encodings shaw,shaw[flex],deberta,deberta[flex]

A row ``NAME[VARIANT]`` is encoding NAME built another way, measured beside NAME's own row
(:data:`VARIANTS`); ``all`` includes each of :data:`VARIANT_ROWS`:

- ``[flex]``: ``model.attention_kernel=flex``, the opt-in FlexAttention routes of the
  encodings that compute attention themselves (:data:`FLEX_ROWS`);
- ``[fused]``: RoPE's fused rotation (``RoPE.fused_rotation``: one compiled kernel per tensor);
- ``[compile]``: the model under ``torch.compile`` (what ``train.compile=true`` does in
  training), and ``[graphs]``: ``torch.compile(mode="reduce-overhead")``, CUDA graphs; on the
  small shape only (a launch-bound model), :data:`COMPILE_ROWS`. Compiling happens in each
  cell's warm-up call, untimed. ``--compile-backend eager`` runs dynamo without Inductor (the
  CPU test's quick run).
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402 - the reference decoder, paired calls and steps: one copy of each

ROOT = bench.ROOT
# The targets, GPT-2-small shape, ÷ the reference in the same run.
TRAIN_TARGETS = {"cheap": 0.95, "bias": 0.8, "other": 0.5}
EVAL_TARGETS = {"cheap": 0.8, "bias": 0.8, "other": 0.5}
CHEAP = {"nope", "rope"}  # training target 0.95; at 16x rope shares the bias encodings' 0.8
ALIBI_TIMES = 3.0  # every encoding at the longest eval length within 3x alibi's time
PEAK_RATIO = 1.5  # peak(longest) / peak(base)
FIRST = ["nope", "rope", "alibi"]  # run first: the budget spends itself on what matters most
# Encodings with an opt-in FlexAttention route (``flex_scores``): each is also a row NAME[flex],
# built with model.attention_kernel=flex, until this run says which kernel auto should take.
FLEX_ROWS = ("deberta", "shaw", "transformer_xl")
# Encodings with RoPE's fused rotation (opt-in): rows NAME[fused].
FUSED_ROWS = ("rope",)
# The compiled model (train.compile's torch.compile) and CUDA graphs on the launch-bound small
# shape: rows NAME[compile] and NAME[graphs], until this run says whether either pays.
COMPILE_ROWS = ("nope", "rope")
COMPILE_SHAPES = ("small",)
# A row's variant -> what it changes: a setting of the config, or a change to the built model.
VARIANTS = {
    "auto": "the default",
    "flex": "model.attention_kernel=flex",
    "fused": "RoPE.fused_rotation = True",
    "compile": "torch.compile(model)",
    "graphs": 'torch.compile(model, mode="reduce-overhead")',
}
VARIANT_ROWS = (
    *(f"{e}[flex]" for e in FLEX_ROWS),
    *(f"{e}[fused]" for e in FUSED_ROWS),
    *(f"{e}[{v}]" for e in COMPILE_ROWS for v in ("compile", "graphs")),
)


@dataclass(frozen=True)
class Shape:
    """One model shape and the lengths it is measured at."""

    name: str
    config: str  # configs/model/<config>
    dims: bench.Dims
    train_lengths: tuple[int, ...]
    eval_lengths: tuple[int, ...]
    peak_base: int  # eval length whose peak divides the longest one's
    step_tokens: int  # tokens per training step at every training length
    targets: bool  # the targets apply (the GPT-2 shape)
    budget_share: float  # of --budget, so that the shapes after it still run


GPU_SHAPES = (
    Shape("gpt2", "small", bench.Dims(768, 12, 12, 3072), (1024, 4096), (16384, 32768), 8192,
          8192, True, 0.8),
    Shape("small", "small", bench.Dims(256, 6, 8, 1024), (1024,), (16384,), 4096, 8192, False, 0.2),
)  # fmt: skip
TINY_SHAPES = (
    Shape("gpt2", "tiny", bench.Dims(32, 2, 2, 64), (32, 64), (128, 256), 64, 128, True, 0.8),
    Shape("small", "tiny", bench.Dims(16, 1, 2, 32), (32,), (128,), 64, 128, False, 0.2),
)


def dims_overrides(shape: Shape) -> list[str]:
    d = shape.dims
    return [
        f"model={shape.config}",
        f"model.d_model={d.d_model}",
        f"model.n_layers={d.n_layers}",
        f"model.n_heads={d.n_heads}",
        f"model.d_ff={d.d_ff}",
    ]


def split_row(encoding: str) -> tuple[str, str]:
    """A row's encoding and variant (:data:`VARIANTS`): ``shaw[flex]`` -> ``("shaw", "flex")``,
    ``shaw`` -> ``("shaw", "auto")``."""
    if encoding.endswith("]") and "[" in encoding:
        name, variant = encoding[:-1].split("[", 1)
        return name, variant
    return encoding, "auto"


def row_names(config_dir: Path) -> list[str]:
    """Every row ``--encodings all`` runs: each encoding of ``config_dir/encoding/*.yaml``, and
    each of :data:`VARIANT_ROWS`."""
    names = [p.stem for p in (Path(config_dir) / "encoding").glob("*.yaml")]
    return sorted([*names, *VARIANT_ROWS])


def runs_on(shape: Shape, row: str) -> bool:
    """Whether ``row`` is measured on ``shape``: compiled rows on :data:`COMPILE_SHAPES` only."""
    return split_row(row)[1] not in ("compile", "graphs") or shape.name in COMPILE_SHAPES


def compiled(model: torch.nn.Module, variant: str, backend: str) -> torch.nn.Module:
    """``model`` as row variant ``variant`` runs it: itself, ``torch.compile(model)``
    (``compile``) or with CUDA graphs (``graphs``: mode ``reduce-overhead``, Inductor only).

    Args:
        model: The built posx model.
        variant: One of :data:`VARIANTS`.
        backend: ``torch.compile``'s backend (``inductor``; ``eager``: dynamo alone).
    """
    if variant not in ("compile", "graphs"):
        return model
    mode = "reduce-overhead" if variant == "graphs" and backend == "inductor" else None
    return torch.compile(model, backend=backend, mode=mode)


def posx_variant(shape: Shape, encoding: str, backend: str = "inductor") -> bench.Variant:
    """The posx model of row ``encoding`` (``NAME`` or ``NAME[VARIANT]``) at ``shape``.

    Args:
        shape: The model shape.
        encoding: The row.
        backend: ``torch.compile``'s backend for ``[compile]`` and ``[graphs]`` rows.
    """
    from posx.config.build import build_model
    from posx.config.compose import compose

    length = max(shape.train_lengths)
    name, variant = split_row(encoding)
    if variant not in VARIANTS:
        raise ValueError(f"unknown row variant [{variant}]; choose from {', '.join(VARIANTS)}")
    kernel = "flex" if variant == "flex" else "auto"
    cfg = compose(
        [
            *dims_overrides(shape),
            f"encoding={name}",
            f"train.length={length}",
            f"model.attention_kernel={kernel}",
        ]
    )
    model = build_model(cfg, bench.VOCAB)
    enc = model.encoding
    if variant == "fused":
        if not hasattr(enc, "fused_rotation"):
            raise ValueError(f"{name} has no fused rotation (RoPE.fused_rotation)")
        enc.fused_rotation = True
    bias = enc.has_bias and not enc.has_attend
    model = compiled(model, variant, backend)
    return bench.Variant(f"posx/{encoding}", encoding, model, enc.max_len, bias, enc.has_attend)


def kind(encoding: str, bias: bool) -> str:
    """The row's kind of target, ``cheap``, ``bias`` or ``other``: its encoding's."""
    name = split_row(encoding)[0]
    return "cheap" if name in CHEAP else "bias" if bias else "other"


# ----------------------------------------------------------------------------- one cell


@dataclass
class Budget:
    """Seconds left for the whole run, and the cells still to run."""

    deadline: float
    cells_left: int

    def share(self) -> float:
        """This cell's fair share of what is left."""
        return max(0.0, self.deadline - time.perf_counter()) / max(1, self.cells_left)

    def left(self) -> float:
        return self.deadline - time.perf_counter()


def peak_of(fn: Callable[[], None], device: torch.device) -> tuple[float, float]:
    """Seconds and peak MiB of one call of ``fn``."""
    from posx.evaluation.memory import PeakMemory

    with PeakMemory(device) as mem:
        seconds = bench.timed(fn, device)
    return seconds, mem.peak_mb


def measure_cell(
    reference: bench.Variant,
    v: bench.Variant,
    call: Callable[[bench.Variant], None],
    predicted: float,
    budget: Budget,
    args: argparse.Namespace,
) -> dict:
    """Warm-up, one timed call of each side (its peak), then paired rounds within the budget.

    Args:
        reference: The plain decoder.
        v: The posx variant.
        call: One training step or forward of a variant.
        predicted: Seconds one call of ``v`` is expected to take (0: unknown).
        budget: What the run has left.
        args: The parsed arguments.

    Returns:
        ``samples`` (the paired rounds), ``peak_mb``, ``reference_peak_mb``, ``seconds``
        (one call of ``v``), or ``note`` where the cell did not run.
    """
    share = budget.share()
    if budget.left() <= 0:
        return {"note": "skipped: the time budget (--budget) is spent"}
    if predicted > share:
        return {"note": f"skipped: one call would take ~{predicted:.0f} s, over its {share:.0f} s"}
    for _ in range(args.warmup):  # compiles, allocator set-up, first dispatch
        call(v)
        call(reference)
    seconds, peak = peak_of(lambda: call(v), args.device)
    ref_seconds, ref_peak = peak_of(lambda: call(reference), args.device)
    calls = {v.name: bench.sample_calls(seconds, args)}
    per_round = calls[v.name] * (seconds + ref_seconds)
    rounds = max(1, min(args.rounds, int(budget.share() // max(per_round, 1e-9))))
    samples = bench.paired_rounds(reference, [v], rounds, call, calls, args.device)
    return {
        "samples": samples,
        "peak_mb": peak,
        "reference_peak_mb": ref_peak,
        "seconds": seconds,
    }


def failure(err: Exception, what: str = "failed") -> dict:
    """A cell's note for an exception: its first line (out of memory, a compile error)."""
    return {"note": f"{what}: {type(err).__name__}: {err}".splitlines()[0][:200]}


class EncodingCells:
    """Every cell of one encoding on one shape, as rows (one per cell and round, or one row
    with a note where the cell did not run).

    Args:
        shape: The model shape and its lengths.
        reference: The plain decoder of that shape, with its optimizer.
        encoding: The encoding's config name.
        budget: What the shape's run has left.
        args: The parsed arguments.
    """

    def __init__(
        self,
        shape: Shape,
        reference: bench.Variant,
        encoding: str,
        budget: Budget,
        args: argparse.Namespace,
    ) -> None:
        self.shape, self.reference, self.budget, self.args = shape, reference, budget, args
        self.gen = torch.Generator().manual_seed(0)
        self.rows: list[dict] = []
        self.v = bench.Variant(f"posx/{encoding}", encoding, torch.nn.Identity())

    def run(self) -> list[dict]:
        shape, dev = self.shape, self.args.device
        try:
            self.v = posx_variant(shape, self.v.encoding, self.args.compile_backend)
            self.v.model.to(dev)
        except Exception as err:  # noqa: BLE001 - one encoding that does not build is its row
            for length in shape.train_lengths:
                self.add("train", length, 0, failure(err, "failed to build"))
            self.add("peak", shape.peak_base, 0, failure(err, "failed to build"))
            for length in shape.eval_lengths:
                self.add("eval", length, 0, failure(err, "failed to build"))
            return self.rows
        self.train_cells()
        self.eval_cells()
        self.v = None
        gc.collect()
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        return self.rows

    def add(self, phase: str, length: int, batch: int, result: dict) -> None:
        self.budget.cells_left -= 1
        v = self.v
        base = {"shape": self.shape.name, "encoding": v.encoding, "phase": phase}
        base |= {"length": length, "batch": batch, "bias_encoding": v.bias}
        base |= {"attend_encoding": v.attend}
        base |= {k: result.get(k, math.nan) for k in ("peak_mb", "reference_peak_mb")}
        if "samples" not in result:
            self.rows.append({**base, "round": 0, "seconds": math.nan, "note": result["note"]})
            return
        for r, s in enumerate(result["samples"][v.name]):
            self.rows.append({**base, "round": r, "seconds": s.seconds, "calls": s.calls,
                              "reference_seconds": s.reference_seconds, "note": ""})  # fmt: skip

    def attempt(self, phase: str, length: int, batch: int, call, predicted: float) -> dict:  # noqa: ANN001
        v = self.v
        if v.max_len is not None and length > v.max_len:
            result = {"note": f"unsupported past {v.max_len} positions"}
        else:
            try:
                result = measure_cell(self.reference, v, call, predicted, self.budget, self.args)
            except Exception as err:  # noqa: BLE001 - e.g. out of memory: a row, not a crash
                result = failure(err)
                if self.args.device.type == "cuda":
                    torch.cuda.empty_cache()
        self.add(phase, length, batch, result)
        return result

    def train_cells(self) -> None:
        """Training steps at every training length, the same tokens per step."""
        v, dev = self.v, self.args.device
        v.model.train()
        v.optimizer = torch.optim.AdamW(v.model.parameters(), lr=1e-4)
        last = (0, 0.0)  # (length, seconds of one step) of the cell before, to predict the next
        for length in self.shape.train_lengths:
            batch = max(1, self.shape.step_tokens // length)
            tokens = torch.randint(0, bench.VOCAB, (batch, length + 1), generator=self.gen)
            # same tokens per step: attention's cost per token grows at most with the length
            predicted = last[1] * length / last[0] if last[0] else 0.0
            result = self.attempt(
                "train",
                length,
                batch,
                lambda w, t=tokens.to(dev): bench.train_step(w, t),
                predicted,
            )
            last = (length, result["seconds"]) if "seconds" in result else (0, 0.0)
        v.optimizer = None  # its optimizer's state is not evaluation's memory

    def eval_cells(self) -> None:
        """One forward at the memory base length (its peak), then paired forwards at every
        evaluation length, one sequence each."""
        v, dev = self.v, self.args.device
        v.model.eval()
        last = (0, 0.0)
        for length in (self.shape.peak_base, *self.shape.eval_lengths):
            tokens = torch.randint(0, bench.VOCAB, (1, length), generator=self.gen).to(dev)
            predicted = last[1] * (length / last[0]) ** 2 if last[0] else 0.0
            if length != self.shape.peak_base:
                result = self.attempt(
                    "eval", length, 1, lambda w, t=tokens: bench.forward(w, t), predicted
                )
            elif self.budget.left() <= 0:
                result = {"note": "skipped: the time budget (--budget) is spent"}
                self.add("peak", length, 1, result)
            else:
                try:
                    # Untimed first, as every cell: a compiled kernel's first call compiles, and
                    # this call's time predicts the next length's (FlexAttention's compile in it
                    # skipped deberta[flex]'s next cell on the CPU).
                    for _ in range(self.args.warmup):
                        bench.forward(v, tokens)
                    seconds, peak = peak_of(lambda t=tokens: bench.forward(v, t), dev)
                    result = {"seconds": seconds, "peak_mb": peak, "note": "peak only"}
                except Exception as err:  # noqa: BLE001
                    result = failure(err)
                self.add("peak", length, 1, result)
            last = (length, result["seconds"]) if "seconds" in result else (0, 0.0)


# ----------------------------------------------------------------------------- the table


def cells(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (shape, encoding, phase, length): median paired ratio, its spread, peaks,
    the target and whether it is met; 32k ÷ alibi and peak(longest) / peak(base) per encoding."""
    df = df.assign(vs_ref=df.reference_seconds / df.seconds)
    keys = ["shape", "encoding", "phase", "length"]
    out = df.groupby(keys, sort=False).agg(
        vs_reference=("vs_ref", "median"),
        iqr=("vs_ref", lambda s: s.quantile(0.75) - s.quantile(0.25)),
        seconds=("seconds", "median"),
        reference_seconds=("reference_seconds", "median"),
        batch=("batch", "first"),
        peak_mb=("peak_mb", "first"),
        reference_peak_mb=("reference_peak_mb", "first"),
        bias_encoding=("bias_encoding", "first"),
        rounds=("seconds", "count"),
        note=("note", "first"),
    )
    out = out.reset_index()
    out["tokens_per_s"] = out.batch * out.length / out.seconds
    out["reference_tokens_per_s"] = out.batch * out.length / out.reference_seconds
    out["target"] = [_target(r) for r in out.itertuples()]
    # posx's time ÷ alibi's at the same cell, from the two paired ratios: (ref/alibi)/(ref/v)
    alibi = out[out.encoding == "alibi"].set_index(["shape", "phase", "length"]).vs_reference
    out["vs_alibi_time"] = [
        alibi.get((r.shape, r.phase, r.length), math.nan) / r.vs_reference for r in out.itertuples()
    ]
    peak = out.set_index(keys).peak_mb
    out["peak_ratio"] = [
        r.peak_mb / peak.get((r.shape, r.encoding, "peak", _shape(r.shape).peak_base), math.nan)
        if r.phase == "eval" and r.length == max(_shape(r.shape).eval_lengths)
        else math.nan
        for r in out.itertuples()
    ]
    out["meets"] = [_meets(r) for r in out.itertuples()]
    return out


_SHAPES: dict[str, Shape] = {}


def _shape(name: str) -> Shape:
    return _SHAPES[name]


def _target(r) -> float:  # noqa: ANN001 - a row of cells()
    if not _shape(r.shape).targets:
        return math.nan
    k = kind(r.encoding, bool(r.bias_encoding))
    if r.phase == "train":
        return TRAIN_TARGETS[k]
    if r.phase == "eval" and r.length == min(_shape(r.shape).eval_lengths):
        return EVAL_TARGETS[k]
    return math.nan


def _meets(r) -> object:  # noqa: ANN001 - a row of cells(); True, False or "" (no target)
    checks = []
    if not math.isnan(r.target):
        checks.append(r.vs_reference >= r.target)
    longest = _shape(r.shape).targets and r.phase == "eval"
    longest = longest and r.length == max(_shape(r.shape).eval_lengths)
    if longest:
        checks.append(r.vs_alibi_time <= ALIBI_TIMES)
        checks.append(r.peak_ratio <= PEAK_RATIO)
    if not checks:
        return ""
    return all(c if isinstance(c, bool) else bool(c) for c in checks)


def label(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def markdown(table: pd.DataFrame, device: str, seconds: float) -> str:
    """The docs' table: per encoding, ÷ the reference at every cell (✓ met, ✗ missed), the
    longest length ÷ alibi's time, peaks and their ratio; the small shape beside."""
    lines = [f"Device: {device}; torch {torch.__version__}; {seconds:.0f} s.", ""]
    for name in dict.fromkeys(table["shape"]):
        t, shape = table[table["shape"] == name], _shape(name)
        cols = [("train", n) for n in shape.train_lengths] + [
            ("eval", n) for n in shape.eval_lengths
        ]
        longest = label(max(shape.eval_lengths))
        head = ["encoding", *(f"{p} {label(n)}" for p, n in cols)]
        head += [f"{longest} ÷ alibi time", f"peak MiB {label(shape.peak_base)} / {longest}"]
        head += ["peak ratio"]
        d = shape.dims
        about = f"{d.n_layers} layers, d_model {d.d_model}, {d.n_heads} heads, d_ff {d.d_ff}"
        lines += [f"**{name}** ({about}) ÷ the reference, paired calls", ""]
        lines += ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
        by = t.set_index(["encoding", "phase", "length"])
        for enc in dict.fromkeys(t.encoding):
            cells_ = [enc]
            for p, n in cols:
                cells_.append(_cell(by.loc[(enc, p, n)]) if (enc, p, n) in by.index else "")
            r = by.loc[(enc, "eval", max(shape.eval_lengths))] if (
                enc, "eval", max(shape.eval_lengths)) in by.index else None  # fmt: skip
            base = by.loc[(enc, "peak", shape.peak_base)] if (
                enc, "peak", shape.peak_base) in by.index else None  # fmt: skip
            cells_.append(_fmt(r.vs_alibi_time, ".2f") if r is not None else "")
            peaks = [_fmt(x.peak_mb, ",.0f") if x is not None else "-" for x in (base, r)]
            cells_.append(" / ".join(peaks))
            cells_.append(_fmt(r.peak_ratio, ".2f") if r is not None else "")
            lines.append("| " + " | ".join(cells_) + " |")
        ref = t[t.phase != "peak"].groupby(["phase", "length"]).reference_tokens_per_s.median()
        lines += ["", "reference tokens/s: " + ", ".join(
            f"{p} {label(n)} {v:,.0f}" for (p, n), v in ref.items() if v == v)]  # fmt: skip
        notes = t[t.note.fillna("").str.len().gt(0) & t.phase.ne("peak")]
        lines += [
            f"- {r.encoding} {r.phase} {label(r.length)}: {r.note}" for r in notes.itertuples()
        ]
        lines.append("")
    return "\n".join(lines)


def _fmt(x: float, spec: str) -> str:
    return "-" if x is None or x != x else format(x, spec)


def _cell(r: pd.Series) -> str:
    if r.vs_reference != r.vs_reference:
        return "—"
    mark = {True: " ✓", False: " ✗"}.get(r.meets, "") if not isinstance(r.meets, str) else ""
    return f"{r.vs_reference:.2f}{mark}"


# ----------------------------------------------------------------------------- main


def parse_args(all_encodings: list[str]) -> argparse.Namespace | str:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--encodings", default="all", help="comma-separated, or all")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cuda or cpu")
    p.add_argument("--tiny", action="store_true", help="tiny shapes (automatic on the CPU)")
    p.add_argument("--shapes", default="gpt2,small", help="gpt2, small or both")
    p.add_argument("--budget", type=float, default=0, help="seconds for all cells (0: 420 GPU, "
                   "120 CPU)")  # fmt: skip
    p.add_argument("--rounds", type=int, default=3, help="paired rounds per cell (fewer if late)")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls per side and cell")
    p.add_argument("--sample-seconds", type=float, default=0.05, help="least time of a sample")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--out", default=None, help="output dir (default results/bench_gpu/<time>)")
    p.add_argument("--compile-backend", default="inductor", choices=("inductor", "eager"),
                   help="torch.compile's backend of [compile] and [graphs] rows")  # fmt: skip
    args = p.parse_args()
    names = [e for e in args.encodings.split(",") if e]
    args.encodings = all_encodings if args.encodings == "all" else names
    unknown = sorted(set(args.encodings) - set(all_encodings))
    if unknown or not args.encodings:
        return f"unknown encoding {', '.join(unknown) or '(none given)'}; choose from " + ", ".join(
            all_encodings
        )
    # FIRST first, then the order given (alphabetical for all): a limited run spends itself on
    # the rows its caller put first
    given = {e: i for i, e in enumerate(args.encodings)}
    args.encodings = sorted(args.encodings, key=lambda e: (e not in FIRST, FIRST.index(e)
                            if e in FIRST else given[e]))  # fmt: skip
    args.shapes = [s for s in args.shapes.split(",") if s]
    if not args.shapes or not set(args.shapes) <= {"gpt2", "small"}:
        return f"--shapes takes gpt2, small or gpt2,small, got {','.join(args.shapes) or '(none)'}"
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    args.device = bench.parse_device(args.device)
    if isinstance(args.device, str):
        return args.device
    if min(args.rounds, args.warmup + 1) < 1 or args.budget < 0 or args.threads < 0:
        return "--rounds must be >= 1, --warmup, --budget and --threads >= 0"
    if not args.sample_seconds > 0:
        return f"--sample-seconds must be > 0, got {args.sample_seconds}"
    args.tiny = args.tiny or args.device.type != "cuda"
    args.budget = args.budget or (120.0 if args.tiny else 420.0)
    return args


def main() -> int:
    from posx.config.compose import CONFIG_DIR

    args = parse_args(row_names(CONFIG_DIR))
    if isinstance(args, str):
        print(f"bench_gpu: error: {args}", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    shapes = [s for s in (TINY_SHAPES if args.tiny else GPU_SHAPES) if s.name in args.shapes]
    _SHAPES.update({s.name: s for s in shapes})
    out = Path(args.out or ROOT / "results" / "bench_gpu" / time.strftime("%Y%m%d-%H%M%S"))
    start = time.perf_counter()
    device = torch.cuda.get_device_name(args.device) if args.device.type == "cuda" else (
        f"cpu ({bench.CPU_NAME}, {torch.get_num_threads()} threads)")  # fmt: skip
    print(f"{device}: {len(args.encodings)} encodings, budget {args.budget:.0f} s")
    rows: list[dict] = []
    out.mkdir(parents=True, exist_ok=True)
    shares = sum(s.budget_share for s in shapes)
    for shape in shapes:
        rows_here = [e for e in args.encodings if runs_on(shape, e)]
        cells_ = (len(shape.train_lengths) + len(shape.eval_lengths) + 1) * len(rows_here)
        seconds = args.budget * shape.budget_share / shares
        budget = Budget(time.perf_counter() + seconds, cells_)
        torch.manual_seed(0)
        reference = bench.Variant("reference", "-", bench.Reference(shape.dims).to(args.device))
        reference.optimizer = torch.optim.AdamW(reference.model.parameters(), lr=1e-4)
        for enc in rows_here:
            rows += EncodingCells(shape, reference, enc, budget, args).run()
            # after every row, so a run stopped from outside (a device's time limit) keeps
            # what finished
            write_tables(out, rows, device, time.perf_counter() - start)
            print(f"  {shape.name} {enc:16s} done, {budget.left():.0f} s left")
            sys.stdout.flush()
        del reference
    text = write_tables(out, rows, device, time.perf_counter() - start)
    print(text)
    print(f"wrote {out / 'bench_gpu.csv'}, cells.csv and table.md")
    return 0


def write_tables(out: Path, rows: list[dict], device: str, seconds: float) -> str:
    """Write ``bench_gpu.csv``, ``cells.csv`` and ``table.md`` of ``rows`` (each atomically) and
    return the table's text."""
    from posx.storage.atomic import atomic_write
    from posx.storage.results import write_csv

    df = pd.DataFrame(rows).assign(device=device, torch=torch.__version__)
    for col in ("reference_seconds", "calls"):
        df[col] = df.get(col, math.nan)
    table = cells(df)
    text = markdown(table, device, seconds)
    write_csv(out / "bench_gpu.csv", df)
    write_csv(out / "cells.csv", table)
    atomic_write(out / "table.md", text)
    return text


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # measure this checkout's posx, not an installed one
    sys.exit(main())
