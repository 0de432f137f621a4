"""scripts/bench.py: the reference model, the ratio arithmetic, a real short run, bad input."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from tests.scripts.script_loader import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench.py"


@pytest.fixture(scope="module")
def bench():
    return load_script("bench")


def test_reference_matches_posx_nope_with_the_same_weights(bench):
    """The ceiling is the same function as posx without positions: copy posx's weights into
    the reference and the logits agree (so its speed is a fair comparison)."""
    posx = bench.posx_variant("tiny", "nope", 16).model.eval()
    ref = bench.Reference(bench.model_dims("tiny")).eval()
    ref.tok.weight.data.copy_(posx.tok.weight)
    ref.norm.load_state_dict(posx.norm.state_dict())
    for mine, theirs in zip(ref.blocks, posx.blocks, strict=True):
        mine.norm1.load_state_dict(theirs.norm1.state_dict())
        mine.norm2.load_state_dict(theirs.norm2.state_dict())
        for name in ("qkv", "proj"):
            getattr(mine, name).weight.data.copy_(getattr(theirs.attn, name).weight)
        mine.fc.weight.data.copy_(theirs.fc.weight)
        mine.out.weight.data.copy_(theirs.out.weight)
    tokens = torch.randint(0, bench.VOCAB, (2, 16))
    torch.testing.assert_close(ref(tokens), posx(tokens), atol=1e-5, rtol=1e-5)


def _rows(samples: dict[str, list[tuple[float, float]]], bias: dict[str, bool]) -> pd.DataFrame:
    """bench.csv rows from variant -> per round (seconds, paired reference seconds)."""
    rows = []
    for variant, per_round in samples.items():
        library, _, enc = variant.partition("/")
        for r, (sec, ref_sec) in enumerate(per_round):
            rows.append(
                {
                    "model": "tiny",
                    "phase": "train",
                    "length": 64,
                    "round": r,
                    "variant": variant,
                    "library": library,
                    "encoding": enc or "-",
                    "bias_encoding": bias.get(enc, False),
                    "seconds_per_step": sec,
                    "reference_seconds_per_step": ref_sec,
                    "tokens_per_s": 1.0 / sec,
                }
            )
    return pd.DataFrame(rows)


def test_ratios_are_medians_of_paired_ratios_with_the_issue_targets(bench):
    # The machine slows down during rope's second sample and x-transformers' third: the
    # reference timed next to them slows alike, so the paired ratios stay put, while a ratio
    # of tokens/s measured at different moments would not.
    samples = {
        "reference": [(1.0, 1.0), (1.0, 1.0), (1.0, 1.0)],
        "posx/rope": [(1.0 / 0.9, 1.0), (2.0 / 0.9, 2.0), (1.0 / 0.9, 1.0)],
        "xtransformers/rope": [(2.0, 1.0), (1.6, 1.0), (4.0, 2.0)],
        "posx/t5": [(1 / 0.79, 1.0), (1 / 0.81, 1.0), (1 / 0.8, 1.0)],
        "posx/shaw": [(10.0, 1.0), (10.0, 1.0), (10.0, 1.0)],
    }
    table = bench.ratios(_rows(samples, {"t5": True})).set_index("encoding")
    assert table.loc["rope", "posx_vs_reference"] == pytest.approx(0.9)
    assert table.loc["rope", "posx_vs_reference_iqr"] == pytest.approx(0.0)
    assert table.loc["rope", "posx_vs_xt"] == pytest.approx(1.8)  # median of 1.8, 1.44, 1.8
    assert table.loc["rope", "posx_tok_s"] == pytest.approx(0.9)  # median of its own speed
    assert table.loc["rope", "meets_target"] is False  # 0.9 < 0.95
    assert table.loc["t5", "posx_vs_reference"] == pytest.approx(0.8)
    assert table.loc["t5", "target_vs_reference"] == 0.8
    assert table.loc["t5", "meets_target"] is True
    assert math.isnan(table.loc["shaw", "target_vs_reference"])  # no target for attend
    assert table.loc["shaw", "meets_target"] == ""


def test_paired_rounds_interleave_variant_and_reference_calls(bench):
    log: list[str] = []
    ref = bench.Variant("reference", "-", torch.nn.Identity())
    a, b = (bench.Variant(f"posx/{n}", n, torch.nn.Identity()) for n in ("a", "b"))
    out = bench.paired_rounds(
        ref,
        [a, b],
        2,
        lambda v: log.append(v.name),
        {"posx/a": 2, "posx/b": 1},
        torch.device("cpu"),
    )
    # round 0 starts at a, round 1 at b; within a sample, who goes first alternates
    assert log == [
        "reference", "posx/a", "posx/a", "reference", "reference", "posx/b",
        "posx/b", "reference", "posx/a", "reference", "reference", "posx/a",
    ]  # fmt: skip
    assert [s.calls for s in out["posx/a"]] == [2, 2] and [s.calls for s in out["reference"]] == [
        3,
        3,
    ]
    assert all(s.seconds > 0 and s.reference_seconds > 0 for s in out["posx/b"])


def test_x_transformers_equivalents_build_and_run(bench):
    pytest.importorskip("x_transformers")
    dims = bench.model_dims("tiny")
    tokens = torch.randint(0, bench.VOCAB, (2, 16))
    for enc in bench.XT_EQUIVALENT:
        v = bench.xt_variant(enc, dims, 16)
        assert v.model(tokens).shape == (2, 16, bench.VOCAB), enc


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_short_run_writes_both_tables(tmp_path):
    proc = run(
        "--models", "tiny", "--encodings", "nope,alibi,learned", "--rounds", "2",
        "--eval-rounds", "2", "--length", "16", "--batch", "4", "--eval-factors", "1,2",
        "--sample-seconds", "0.001",
        "--no-xtransformers", "--threads", "1", "--out", str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = pd.read_csv(tmp_path / "bench.csv")
    timed = data.dropna(subset=["tokens_per_s"])
    assert set(timed.variant) == {"reference", "posx/nope", "posx/alibi", "posx/learned"}
    assert (timed.tokens_per_s > 0).all() and set(timed["round"]) == {0, 1}
    assert set(data.threads) == {1}
    gap = data[(data.variant == "posx/learned") & (data.length == 32)]
    assert gap.tokens_per_s.isna().all() and "unsupported" in gap.note.iloc[0]
    table = pd.read_csv(tmp_path / "ratios.csv")
    train = table[table.phase == "train"].set_index("encoding")
    assert sorted(train.index) == ["alibi", "learned", "nope"]
    assert train.posx_vs_reference.between(0.05, 20).all()
    assert "tiny · train · length 16" in proc.stdout


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--encodings", "nope,bogus"], "unknown encoding bogus; choose from "),
        (["--models", "huge"], "unknown model huge; choose from small, tiny"),
        (["--eval-factors", "1,x"], "--eval-factors takes integers"),
        (["--rounds", "0"], "must be >= 1"),
        (["--eval-rounds", "0"], "must be >= 1"),
        (["--device", "cuda:7"] if not torch.cuda.is_available() else ["--device", "tpu"], "-"),
    ],
)
def test_bad_arguments_are_one_line_errors(bench, tmp_path, monkeypatch, capsys, args, text):
    """The script's main() in this process (each subprocess paid ~2 s of imports to print one
    line); test_a_bad_argument_through_the_script runs it as `make bench` does."""
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *args, "--out", str(tmp_path / "out")])
    assert bench.main() == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench: error:") and text in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_a_bad_argument_through_the_script(tmp_path):
    proc = run("--encodings", "nope,bogus", "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench: error:"), lines
    assert "unknown encoding bogus; choose from " in lines[0], lines
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_eval_phase_alone(tmp_path):
    proc = run(
        "--models", "tiny", "--encodings", "nope,shaw", "--phases", "eval",
        "--eval-rounds", "1", "--length", "16", "--batch", "2", "--eval-factors", "2",
        "--sample-seconds", "0.001", "--threads", "1", "--out", str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = pd.read_csv(tmp_path / "bench.csv")
    assert set(data.phase) == {"eval"} and set(data.length) == {32}
    assert set(data.variant) == {"reference", "posx/nope", "posx/shaw"}
    bad = run("--phases", "train,test")
    assert bad.returncode == 2 and "--phases" in bad.stderr


def test_attend_encodings_have_issue_34_targets(bench):
    """Training: 0.7 for an encoding that computes attention itself; evaluation: 0.5 on the
    tiny model at 16x the training length, and no target at other lengths."""
    train = _rows({"reference": [(1.0, 1.0)] * 3, "posx/shaw": [(1 / 0.72, 1.0)] * 3}, {}).assign(
        attend_encoding=lambda d: d.encoding == "shaw", length_factor=1
    )
    table = bench.ratios(train).set_index("encoding")
    assert table.loc["shaw", "target_vs_reference"] == 0.7
    assert table.loc["shaw", "meets_target"] == True  # noqa: E712 - numpy's bool
    evals = []
    for factor, speed in ((16, 0.45), (4, 0.45)):
        rows = _rows({"reference": [(1.0, 1.0)] * 3, "posx/shaw": [(1 / speed, 1.0)] * 3}, {})
        evals.append(
            rows.assign(
                phase="eval",
                length=64 * factor,
                length_factor=factor,
                attend_encoding=lambda d: d.encoding == "shaw",
            )
        )
    table = bench.ratios(pd.concat(evals)).set_index(["length", "encoding"])
    assert table.loc[(1024, "shaw"), "target_vs_reference"] == 0.5
    assert table.loc[(1024, "shaw"), "meets_target"] == False  # noqa: E712 - 0.45 < 0.5
    assert math.isnan(table.loc[(256, "shaw"), "target_vs_reference"])
    assert table.loc[(256, "shaw"), "meets_target"] == ""


def test_a_variant_failing_at_an_eval_length_is_a_row_not_a_crash(bench):
    """Abacus under the default positions fails past its table (max_index rows, 512) at 16x
    the training length of 64; `make bench` stopped there. The failing variant gets a row that
    says why, and the others are still timed."""

    class FailsPast(torch.nn.Module):
        def __init__(self, limit: int) -> None:
            super().__init__()
            self.limit, self.inner = limit, bench.Reference(bench.Dims(16, 1, 2, 32))

        def forward(self, tokens):
            if tokens.shape[-1] > self.limit:
                raise ValueError(f"index {tokens.shape[-1] - 1} is past the table\nsecond line")
            return self.inner(tokens)

    dims = bench.Dims(16, 1, 2, 32)
    reference = bench.Variant("reference", "-", bench.Reference(dims))
    fine = bench.Variant("posx/nope", "nope", bench.Reference(dims))
    failing = bench.Variant("posx/abacus", "abacus", FailsPast(16))
    args = SimpleNamespace(
        device=torch.device("cpu"), length=8, batch=2, eval_factors=[1, 4], eval_rounds=1,
        sample_seconds=0.0, threads=1,
    )  # fmt: skip
    rows: list[dict] = []
    calls: dict[str, int] = {}
    bench.bench_evaluation("tiny", reference, [fine, failing], torch.Generator(), calls, args, rows)
    data = pd.DataFrame(rows)
    at_32 = data[data.length == 32].set_index("variant")
    assert at_32.loc["posx/abacus", "note"] == "failed: ValueError: index 31 is past the table"
    assert math.isnan(at_32.loc["posx/abacus", "tokens_per_s"])
    assert at_32.loc["posx/nope", "tokens_per_s"] > 0
    assert (data[data.length == 8].tokens_per_s > 0).all()  # within its table it is timed
