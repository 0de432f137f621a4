"""What posx's flexibility costs: training and evaluation throughput side by side.

One process builds, for each model size, every variant once and times each against a
plain-PyTorch reference, call by call (a call of the variant, one of the reference, ...), so the
slow and fast spells of a shared machine hit both sides of a ratio alike. That repeats in
rounds (round r starts at variant r); medians over the rounds are reported:

- ``posx/<encoding>``: posx's ``TransformerLM`` with each encoding in ``configs/encoding``;
- ``reference``: a plain-PyTorch decoder written below with the same dimensions (pre-norm,
  fused qkv, SDPA causal, GELU MLP, tied head) and no positional encoding: the ceiling;
- ``xtransformers/<encoding>``: lucidrains' x-transformers (the optional ``bench`` extra) with
  the same dimensions, for the encodings both libraries have.

A training step is forward, cross-entropy over every token, backward, gradient clipping and an
AdamW step, on random tokens (the data pipeline is the same for all and not what is measured).
The evaluation side times inference-mode forwards at 1x, 4x and 16x the training length with
the same number of tokens per call. Results go to ``<out>/bench.csv`` (one row per measurement,
with threads, torch version and device in every row) and ``<out>/ratios.csv``.

    python scripts/bench.py                                # tiny and small, all encodings
    python scripts/bench.py --models tiny --encodings nope,rope,alibi --rounds 9
    python scripts/bench.py --models small --phases eval --eval-factors 16 --encodings alibi,shaw
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor, nn

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 256  # the byte-level text task's vocabulary
# Targets from the issue: posx / reference for the cheap encodings, the rest, and posx / x-t.
CHEAP = {"nope", "sinusoidal", "learned", "rope", "alibi"}
TARGET_CHEAP, TARGET_BIAS, TARGET_XT = 0.95, 0.8, 1.2
# Encodings that compute attention themselves (issue 34): training, and evaluation at 16x the
# training length by model.
TARGET_ATTEND = 0.7
TARGET_ATTEND_EVAL = {"tiny": 0.5, "small": 0.7}
ATTEND_EVAL_FACTOR = 16
# posx encoding -> x-transformers keyword arguments (wrapper, decoder) for the same idea.
XT_EQUIVALENT: dict[str, tuple[dict, dict]] = {
    "nope": ({"use_abs_pos_emb": False}, {}),
    "learned": ({"use_abs_pos_emb": True}, {}),
    "sinusoidal": ({"use_abs_pos_emb": True, "scaled_sinu_pos_emb": True}, {}),
    "rope": ({"use_abs_pos_emb": False}, {"rotary_pos_emb": True}),
    "xpos": ({"use_abs_pos_emb": False}, {"rotary_pos_emb": True, "rotary_xpos": True}),
    "alibi": ({"use_abs_pos_emb": False}, {"alibi_pos_bias": True}),
    "t5": ({"use_abs_pos_emb": False}, {"rel_pos_bias": True}),
}


@dataclass(frozen=True)
class Dims:
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int


# ----------------------------------------------------------------------------- the reference


class RefBlock(nn.Module):
    def __init__(self, d: Dims) -> None:
        super().__init__()
        self.h = d.n_heads
        self.norm1, self.norm2 = nn.LayerNorm(d.d_model), nn.LayerNorm(d.d_model)
        self.qkv = nn.Linear(d.d_model, 3 * d.d_model, bias=False)
        self.proj = nn.Linear(d.d_model, d.d_model, bias=False)
        self.fc = nn.Linear(d.d_model, d.d_ff, bias=False)
        self.out = nn.Linear(d.d_ff, d.d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        b, s, dm = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.h, dm // self.h).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, dm))
        return x + self.out(F.gelu(self.fc(self.norm2(x))))


class Reference(nn.Module):
    """The plainest decoder of these dimensions: no positional information at all."""

    def __init__(self, d: Dims) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d.d_model)
        self.blocks = nn.ModuleList(RefBlock(d) for _ in range(d.n_layers))
        self.norm = nn.LayerNorm(d.d_model)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.tok(tokens)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.norm(x), self.tok.weight)


# ----------------------------------------------------------------------------- the variants


@dataclass
class Variant:
    name: str  # "posx/rope", "reference", "xtransformers/rope"
    encoding: str  # "rope"; "-" for the reference
    model: nn.Module
    max_len: int | None = None  # longest sequence the variant accepts (learned tables)
    bias: bool = False  # a bias encoding (the 0.8x target)
    attend: bool = False  # computes attention itself (issue 34's targets)
    optimizer: torch.optim.Optimizer | None = None

    @property
    def library(self) -> str:
        return self.name.split("/")[0]


def posx_variant(model_name: str, encoding: str, length: int) -> Variant:
    from posx.config.build import build_model
    from posx.config.compose import compose

    cfg = compose([f"model={model_name}", f"encoding={encoding}", f"train.length={length}"])
    model = build_model(cfg, VOCAB)
    enc = model.encoding
    bias = enc.has_bias and not enc.has_attend
    return Variant(f"posx/{encoding}", encoding, model, enc.max_len, bias, enc.has_attend)


def xt_variant(encoding: str, d: Dims, length: int) -> Variant | None:
    try:
        from x_transformers import Decoder, TransformerWrapper
    except ImportError:
        return None
    wrapper_kw, decoder_kw = XT_EQUIVALENT[encoding]
    model = TransformerWrapper(
        num_tokens=VOCAB,
        max_seq_len=length,
        tie_embedding=True,
        **wrapper_kw,
        attn_layers=Decoder(
            dim=d.d_model,
            depth=d.n_layers,
            heads=d.n_heads,
            ff_mult=d.d_ff // d.d_model,
            # SDPA is x-transformers' fastest path; it refuses it with T5's bias.
            attn_flash=encoding != "t5",
            **decoder_kw,
        ),
    )
    return Variant(f"xtransformers/{encoding}", encoding, model, length)


def model_dims(model_name: str) -> Dims:
    from posx.config.compose import compose

    m = compose([f"model={model_name}"]).model
    return Dims(m.d_model, m.n_layers, m.n_heads, m.d_ff)


# ----------------------------------------------------------------------------- timing


def cpu_name() -> str:
    """The processor's model name (Linux's /proc/cpuinfo), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


CPU_NAME = cpu_name()


def train_step(v: Variant, tokens: Tensor) -> None:
    with torch.autocast(tokens.device.type, torch.bfloat16, enabled=tokens.is_cuda):
        logits = v.model(tokens[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
    v.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(v.model.parameters(), 1.0)
    v.optimizer.step()


def forward(v: Variant, tokens: Tensor) -> None:
    with (
        torch.inference_mode(),
        torch.autocast(tokens.device.type, torch.bfloat16, enabled=tokens.is_cuda),
    ):
        v.model(tokens)


def timed(fn: Callable[[], None], device: torch.device) -> float:
    """Seconds that one call of ``fn`` takes (waiting for the GPU to finish)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


@dataclass
class Sample:
    """One variant in one round: its seconds per call, and the reference's next to it."""

    seconds: float
    reference_seconds: float
    calls: int


def paired_rounds(
    reference: Variant,
    variants: list[Variant],
    rounds: int,
    call: Callable[[Variant], None],
    calls: dict[str, int],
    device: torch.device,
) -> dict[str, list[Sample]]:
    """Times every variant against the reference, call by call, in ``rounds`` rounds.

    A shared machine drifts between fast and slow spells lasting seconds (steps of one model
    ranged 25-42 ms here, in runs of tens of steps), so a variant timed now and the reference
    timed seconds later differ by more than posx's cost. Each sample therefore interleaves
    ``calls[v]`` calls of the variant with as many of the reference, alternating which goes
    first, and the ratio of the two is taken within the sample. Round r starts at variant r.

    Returns:
        Variant name -> one :class:`Sample` per round; the reference's own entry holds, per
        round, the mean of its calls in that round.
    """
    out: dict[str, list[Sample]] = {v.name: [] for v in variants}
    ref_seconds: list[list[float]] = [[] for _ in range(rounds)]
    for r in range(rounds):
        k = r % len(variants)
        for v in variants[k:] + variants[:k]:
            mine, theirs = [], []
            for i in range(calls[v.name]):
                first_ref = (r + i) % 2 == 0
                for which in (reference, v) if first_ref else (v, reference):
                    (theirs if which is reference else mine).append(
                        timed(lambda w=which: call(w), device)
                    )
            out[v.name].append(Sample(sum(mine) / len(mine), sum(theirs) / len(theirs), len(mine)))
            ref_seconds[r] += theirs
    out[reference.name] = [
        Sample(statistics.fmean(t), statistics.fmean(t), len(t)) for t in ref_seconds
    ]
    return out


def sample_calls(seconds_per_call: float, args: argparse.Namespace) -> int:
    """Calls of a variant that make one sample of about ``--sample-seconds``."""
    return max(1, math.ceil(args.sample_seconds / seconds_per_call))


def bench_model(model_name: str, args: argparse.Namespace, rows: list[dict]) -> None:
    """Times every variant of one model size in the ``--phases`` asked for; appends one row per
    (variant, phase, length, round) to ``rows``."""
    dims, length, batch, dev = model_dims(model_name), args.length, args.batch, args.device
    reference = Variant("reference", "-", Reference(dims))
    variants = [posx_variant(model_name, e, length) for e in args.encodings]
    if not args.no_xtransformers and "train" in args.phases:  # x-t is timed in training only
        xts = [xt_variant(e, dims, length) for e in args.encodings if e in XT_EQUIVALENT]
        if any(x is None for x in xts):
            print("x-transformers is not installed (pip install -e '.[bench]'); left out")
        variants += [x for x in xts if x is not None]
    for v in [reference, *variants]:
        v.model.to(dev)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, VOCAB, (batch, length + 1), generator=gen).to(dev)

    calls: dict[str, int] = {}
    if "train" in args.phases:
        bench_training(model_name, reference, variants, tokens, calls, args, rows)
    if "eval" in args.phases:
        bench_evaluation(model_name, reference, variants, gen, calls, args, rows)


def bench_training(
    model_name: str,
    reference: Variant,
    variants: list[Variant],
    tokens: Tensor,
    calls: dict[str, int],
    args: argparse.Namespace,
    rows: list[dict],
) -> None:
    """Paired training steps of every variant against the reference."""
    dev, length, batch = args.device, args.length, args.batch
    # Every variant gets its optimizer and untimed warm-up steps (allocator, first dispatch);
    # one more, timed, sets how many steps make a sample.
    for v in [reference, *variants]:
        v.model.train()
        v.optimizer = torch.optim.AdamW(v.model.parameters(), lr=1e-4)
        for _ in range(args.warmup):
            train_step(v, tokens)
        calls[v.name] = sample_calls(timed(lambda v=v: train_step(v, tokens), dev), args)
    samples = paired_rounds(
        reference, variants, args.rounds, lambda v: train_step(v, tokens), calls, dev
    )
    for v in [reference, *variants]:
        rows += [
            row(model_name, v, "train", length, batch, r, s, args)
            for r, s in enumerate(samples[v.name])
        ]
        tps = batch * length / statistics.median(s.seconds for s in samples[v.name])
        print(f"  train {v.name:28s} {tps:>10,.0f} tok/s")
        v.optimizer = None  # free the optimizer state before evaluating


def bench_evaluation(
    model_name: str,
    reference: Variant,
    variants: list[Variant],
    gen: torch.Generator,
    calls: dict[str, int],
    args: argparse.Namespace,
    rows: list[dict],
) -> None:
    """Paired inference-mode forwards at every ``--eval-factors`` length: the same tokens per
    forward at every length. x-transformers is left out: its absolute tables stop at the
    training length, and the reference is the ceiling."""
    dev, length, batch = args.device, args.length, args.batch
    evaluated = [v for v in variants if v.library != "xtransformers"]
    for factor in args.eval_factors:
        n = length * factor
        b = max(1, batch * length // n)
        inputs = torch.randint(0, VOCAB, (b, n), generator=gen).to(dev)
        ok = [v for v in evaluated if v.max_len is None or n <= v.max_len]
        failed: dict[str, str] = {}
        for v in [reference, *ok]:
            v.model.eval()
            try:
                forward(v, inputs)  # the first call at this shape allocates
            except Exception as err:  # noqa: BLE001 - one variant's failure is its row's note
                if v is reference:
                    raise
                # e.g. abacus's table (max_index rows) under the default positions: a row
                # that says why, not a crashed benchmark
                failed[v.name] = f"failed: {type(err).__name__}: {err}".splitlines()[0]
                continue
            calls[v.name] = sample_calls(timed(lambda v=v, x=inputs: forward(v, x), dev), args)
        ok = [v for v in ok if v.name not in failed]
        samples = paired_rounds(
            reference, ok, args.eval_rounds, lambda v, x=inputs: forward(v, x), calls, dev
        )
        rows += [
            row(model_name, reference, "eval", n, b, r, s, args)
            for r, s in enumerate(samples[reference.name])
        ]
        for v in evaluated:
            if v in ok:
                rows += [
                    row(model_name, v, "eval", n, b, r, s, args)
                    for r, s in enumerate(samples[v.name])
                ]
            else:
                nan = row(model_name, v, "eval", n, b, 0, Sample(math.nan, math.nan, 0), args)
                note = failed.get(v.name, f"unsupported past {v.max_len}")
                rows.append({**nan, "note": note})
        print(f"  eval  length {n}: {len(ok)} variants")


def row(
    model: str,
    v: Variant,
    phase: str,
    length: int,
    batch: int,
    rnd: int,
    sample: Sample,
    args: argparse.Namespace,
) -> dict:
    """One measurement, with what is needed to compare it: machine, threads, torch, dtype."""
    cuda = args.device.type == "cuda"
    return {
        "model": model,
        "variant": v.name,
        "library": v.library,
        "encoding": v.encoding,
        "bias_encoding": v.bias,
        "attend_encoding": v.attend,
        "phase": phase,
        "length": length,
        "length_factor": length // args.length,
        "batch": batch,
        "round": rnd,
        "seconds_per_step": sample.seconds,
        "tokens_per_s": batch * length / sample.seconds,
        "reference_seconds_per_step": sample.reference_seconds,
        "note": "",
        "calls_per_sample": sample.calls,
        "device": torch.cuda.get_device_name(args.device) if cuda else "cpu",
        "dtype": "bf16-autocast" if cuda else "fp32",
        "threads": torch.get_num_threads(),
        "cpu": CPU_NAME,
        "torch": torch.__version__,
    }


# ----------------------------------------------------------------------------- ratios


def ratios(df: pd.DataFrame) -> pd.DataFrame:
    """Per (model, phase, length, encoding): median tokens/s and the medians over rounds of
    the ratios to the reference and to x-transformers.

    Each sample pairs a variant's calls with the reference's (see :func:`paired_rounds`), so
    ``posx / reference`` in a round is ``reference_seconds / seconds`` of one sample, and
    ``posx / x-transformers`` is the ratio of the two variants' ratios to the reference.
    """
    df = df.dropna(subset=["tokens_per_s"]).assign(
        vs_ref=lambda d: d.reference_seconds_per_step / d.seconds_per_step
    )
    keys = ["model", "phase", "length", "round"]
    tps = df.pivot_table(index=keys, columns="variant", values="tokens_per_s")
    rel = df.pivot_table(index=keys, columns="variant", values="vs_ref")
    out = []
    for (model, phase, length), g in df.groupby(["model", "phase", "length"], sort=False):
        w, v = tps.loc[(model, phase, length)], rel.loc[(model, phase, length)]
        kinds = g[g.library == "posx"].groupby("encoding", sort=False).first()
        for enc, kind in kinds.iterrows():
            posx, xt = w[f"posx/{enc}"], f"xtransformers/{enc}"
            per_round = v[f"posx/{enc}"]
            vs_ref, spread = per_round.median(), per_round.quantile(0.75) - per_round.quantile(0.25)
            vs_xt = (per_round / v[xt]).median() if xt in w else math.nan
            target = _target(model, phase, enc, kind)
            checks = [vs_ref >= target] if target == target else []
            checks += [vs_xt >= TARGET_XT] if xt in w and phase == "train" else []
            meets = all(checks) if checks else ""
            out.append(
                {
                    "model": model,
                    "phase": phase,
                    "length": length,
                    "encoding": enc,
                    "posx_tok_s": posx.median(),
                    "reference_tok_s": w["reference"].median(),
                    "xt_tok_s": w[xt].median() if xt in w else math.nan,
                    "posx_vs_reference": vs_ref,
                    "posx_vs_reference_iqr": spread,
                    "target_vs_reference": target,
                    "posx_vs_xt": vs_xt,
                    "target_vs_xt": TARGET_XT if xt in w else math.nan,
                    "meets_target": meets,
                    "rounds": int(posx.notna().sum()),
                }
            )
    return pd.DataFrame(out)


def _target(model: str, phase: str, encoding: str, kind: pd.Series) -> float:
    """The issues' target for posx ÷ reference (NaN: none). Training: 0.95 for the cheap
    encodings, 0.8 for the other bias encodings, 0.7 for those that compute attention
    themselves; evaluation: the last at 16x the training length only (0.5 tiny, 0.7 small)."""
    attend = bool(kind.get("attend_encoding", False))
    if phase == "train":
        if encoding in CHEAP:
            return TARGET_CHEAP
        return TARGET_BIAS if kind.bias_encoding else TARGET_ATTEND if attend else math.nan
    at_factor = kind.get("length_factor", math.nan) == ATTEND_EVAL_FACTOR
    return TARGET_ATTEND_EVAL.get(model, math.nan) if attend and at_factor else math.nan


def print_table(table: pd.DataFrame) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.width = max(console.width, 100)  # the target column fits on one line
    models = list(dict.fromkeys(table.model))  # in the order they were run
    order = table.assign(m=table.model.map(models.index), train_first=table.phase != "train")
    order = order.sort_values(["m", "train_first", "length"], kind="stable")
    for (model, phase, length), g in order.groupby(["model", "phase", "length"], sort=False):
        t = Table(title=f"{model} · {phase} · length {length} · {torch.get_num_threads()} threads")
        for col in ("encoding", "posx tok/s", "÷ reference", "÷ x-transformers", "target"):
            t.add_column(col, justify="left" if col == "encoding" else "right")
        for _, r in g.sort_values("posx_vs_reference", ascending=False).iterrows():
            xt = f"{r.posx_vs_xt:.2f}" if pd.notna(r.posx_vs_xt) else ""
            goals = [f"≥{r.target_vs_reference:.2f}"] if pd.notna(r.target_vs_reference) else []
            goals += [f"x-t ≥{r.target_vs_xt:.2f}"] if pd.notna(r.target_vs_xt) else []
            goal = ", ".join(goals)
            met = {True: f"[green]met {goal}", False: f"[red]missed {goal}", "": ""}[r.meets_target]
            vs = f"{r.posx_vs_reference:.2f} ±{r.posx_vs_reference_iqr / 2:.2f}"
            t.add_row(r.encoding, f"{r.posx_tok_s:,.0f}", vs, xt, met)
        ref = g.reference_tok_s.iloc[0]
        t.caption = (
            f"reference (plain PyTorch, SDPA causal): {ref:,.0f} tok/s; ratios: median over "
            "rounds of the ratio within a round (paired calls), ± half its interquartile range"
        )
        console.print(t)


def fail(message: str) -> int:
    print(f"bench: error: {message}", file=sys.stderr)
    return 2


def parse_device(name: str) -> torch.device | str:
    """``--device``'s value as a device, or a one-line message saying what is wrong."""
    if name.startswith("cuda") and not torch.cuda.is_available():
        return f"--device {name} but CUDA is not available; use --device cpu"
    try:
        return torch.device(name)
    except RuntimeError:
        return f"unknown --device {name!r}; use cpu or cuda[:N]"


def parse_args(all_encodings: list[str], all_models: list[str]) -> argparse.Namespace | str:
    """The arguments, or a one-line message saying what is wrong."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="tiny,small", help="model configs, comma-separated")
    p.add_argument("--encodings", default=",".join(all_encodings))
    p.add_argument("--length", type=int, default=64, help="training length (train.length)")
    p.add_argument("--batch", type=int, default=32, help="training batch (train.batch_size)")
    p.add_argument("--rounds", type=int, default=5, help="training rounds (medians over them)")
    p.add_argument("--eval-rounds", type=int, default=3, help="evaluation rounds")
    p.add_argument(
        "--sample-seconds", type=float, default=0.1, help="least time of one timed sample"
    )
    p.add_argument("--warmup", type=int, default=2, help="untimed training steps per variant")
    p.add_argument("--eval-factors", default="1,4,16", help="eval lengths as multiples of --length")
    p.add_argument("--phases", default="train,eval", help="train, eval or both (comma-separated)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--device", default="cpu", help="cpu, or cuda (bf16 autocast, as posx trains)")
    p.add_argument("--out", default=None, help="output dir (default results/bench/<time>)")
    p.add_argument("--no-xtransformers", action="store_true", help="leave x-transformers out")
    args = p.parse_args()
    args.models = [m for m in args.models.split(",") if m]
    args.encodings = [e for e in args.encodings.split(",") if e]
    groups = (("model", args.models, all_models), ("encoding", args.encodings, all_encodings))
    for what, given, known in groups:
        unknown = ", ".join(sorted(set(given) - set(known))) or (
            "(none given)" if not given else ""
        )
        if unknown:
            return f"unknown {what} {unknown}; choose from {', '.join(known)}"
    args.phases = [p for p in args.phases.split(",") if p]
    if not args.phases or not set(args.phases) <= {"train", "eval"}:
        return f"--phases takes train, eval or train,eval, got {','.join(args.phases) or '(none)'}"
    try:
        args.eval_factors = [int(f) for f in args.eval_factors.split(",") if f]
    except ValueError:
        return f"--eval-factors takes integers like 1,4,16, got {args.eval_factors!r}"
    args.device = parse_device(args.device)
    if isinstance(args.device, str):
        return args.device
    counts = [args.length, args.batch, args.rounds, args.eval_rounds, *args.eval_factors]
    if min(counts) < 1 or args.warmup < 0 or args.threads < 0 or not args.sample_seconds > 0:
        return (
            "--length, --batch, --rounds, --eval-rounds and --eval-factors must be >= 1, "
            "--warmup >= 0, --sample-seconds > 0"
        )
    return args


def main() -> int:
    from posx.config.compose import CONFIG_DIR
    from posx.storage.results import write_csv

    def names(group: str) -> list[str]:
        return sorted(p.stem for p in (Path(CONFIG_DIR) / group).glob("*.yaml"))

    args = parse_args(names("encoding"), names("model"))
    if isinstance(args, str):
        return fail(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out or ROOT / "results" / "bench" / time.strftime("%Y%m%d-%H%M%S"))
    torch.manual_seed(0)
    rows: list[dict] = []
    start = time.perf_counter()
    for model_name in args.models:
        print(f"{model_name}: {len(args.encodings)} encodings, {args.rounds} rounds")
        bench_model(model_name, args, rows)
    df = pd.DataFrame(rows)
    table = ratios(df)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "bench.csv", df)
    write_csv(out / "ratios.csv", table)
    print_table(table)
    print(
        f"{time.perf_counter() - start:.0f} s, {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}; wrote {out / 'bench.csv'} and ratios.csv"
    )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # measure this checkout's posx, not an installed one
    sys.exit(main())
