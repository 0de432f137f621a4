"""Byte-level and BPE runs on one corpus: every row labelled L reads L tokens at once, and bits
per byte are exact over the held-out text its tokens cover.

Runs train 5 steps and are evaluated with ``eval.tokens=320`` (a multiple of every eval length):
``320 / L`` full windows of ``L`` tokens over the held-out split from its start, so a byte-level
run scores 320 bytes and a BPE run 320 tokens (about 2.2 bytes each here). The bytes and tokens
are counted here from the raw file and HF's own tokenizer, independently of posx.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf
from safetensors.torch import load_file
from tokenizers import Tokenizer

from posx.config.compose import compose
from posx.evaluation.sweep import evaluate_run
from posx.runs.job import train_and_evaluate
from posx.saved import SavedRun

WORDS = ["the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "a", "on"]
EVAL_TEXT = 320  # eval.tokens, a multiple of every eval length (byte 20, 40; BPE 8, 16)
MODEL = [
    "model.d_model=32",
    "model.n_layers=1",
    "model.n_heads=4",
    "model.d_ff=64",
]
TINY = [
    *MODEL,
    "train.steps=5",
    "train.batch_size=4",
    "train.warmup_steps=1",
    "train.progress=false",
    f"eval.tokens={EVAL_TEXT}",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("corpus") / "prose.txt"
    path.write_text(" ".join(rng.choice(WORDS) + rng.choice(["", ",", ".\n"]) for _ in range(6000)))
    return path


def train_run(root: Path, corpus: Path, name: str, length: int, *task: str) -> Path:
    lengths = [length, 2 * length]
    cfg = compose(
        [
            "task=text",
            f"task.corpus={corpus}",
            "task.val_fraction=0.1",
            *task,
            "encoding=alibi",
            *TINY,
            f"train.length={length}",
            f"eval.lengths=[{lengths[0]},{lengths[1]}]",
            f"root={root}",
        ]
    )
    run = root / "runs" / name
    (run / ".hydra").mkdir(parents=True)
    OmegaConf.save(cfg, run / ".hydra" / "config.yaml")  # what Hydra saves, for `posx eval`
    train_and_evaluate(cfg, run, {"encoding": "alibi", "task": name, "model": "tiny"})
    return run


def val_text(corpus: Path) -> bytes:
    """The held-out bytes of ``task.val_fraction=0.1``, read from the file."""
    data = corpus.read_bytes()
    return data[int(len(data) * 0.9) :]


def bpe_ids(root: Path, text: bytes) -> list[int]:
    """``text`` tokenized by HF's own tokenizer, loaded from the run's tokenizer cache."""
    (tokenizer_file,) = (root / ".tokenizer_cache").glob("bpe320_*.json")
    return Tokenizer.from_file(str(tokenizer_file)).encode(text.decode()).ids


def test_bpe_rows_read_the_tokens_their_length_says(posx, tmp_path, corpus):
    """``posx train task=text_bpe`` then ``posx eval --lengths``: a row labelled L scores
    ``ceil(eval.tokens / L)`` full windows of L tokens (not L bytes), records the longest context
    it read, and a length the held-out split cannot fill is unsupported, naming its tokens."""
    root = tmp_path / "results"
    task = ["task=text_bpe", f"task.corpus={corpus}", "task.val_fraction=0.1"]
    train = [*task, "task.vocab_size=320", "encoding=alibi", *TINY, "train.length=16"]
    posx("train", *train, "eval.lengths=[16]", f"root={root}", check=True)
    (run,) = [p.parent for p in root.rglob("run.json")]
    available = 1 + len(bpe_ids(root, val_text(corpus)[1:]))  # byte 0's token, then the rest
    assert 1024 < available <= 2048  # 2668 held-out bytes: one window of 1024, none of 2048
    posx("eval", str(run), "--lengths", "16,64,1024,2048", "--no-progress", check=True)
    rows = pd.read_csv(run / "eval.csv").set_index("eval_length")
    assert rows["status"].to_dict() == {16: "ok", 64: "ok", 1024: "ok", 2048: "unsupported"}
    reason = rows.loc[2048, "reason"]
    assert f"has {available} tokens" in reason and "one sequence of 2048 tokens" in reason
    ok = rows[rows["status"] == "ok"]
    assert ok["sequences"].to_dict() == {16: 20, 64: 5, 1024: 1}
    assert ok["tokens"].to_dict() == {16: 320, 64: 320, 1024: 1024}  # tokens, not bytes
    assert ok["max_context"].to_dict() == {16: 16, 64: 64, 1024: 1024}
    # bits per byte over the bytes those tokens stand for, counted with HF's tokenizer
    held_out = val_text(corpus)
    for length, row in ok.iterrows():
        text = held_out[1 : 1 + int(row["bytes"])]
        assert len(bpe_ids(root, text)) == row["tokens"], length
        nats = row["loss"] * row["tokens"]
        assert row["bpb"] == pytest.approx(nats / math.log(2) / len(text), rel=1e-9)


@pytest.mark.slow  # ~4 s in a warm session, ~14 s alone (imports)
def test_byte_and_bpe_runs_report_exact_bits_per_byte_over_the_held_out_text(tmp_path, corpus):
    byte = train_run(tmp_path, corpus, "byte", 20)
    bpe = train_run(tmp_path, corpus, "bpe", 8, "task.tokenizer=bpe", "task.vocab_size=320")
    held_out = val_text(corpus)  # counted from the file
    frames = {r.name: pd.read_csv(r / "eval.csv") for r in (byte, bpe)}
    for name, frame in frames.items():
        assert list(frame["status"]) == ["ok", "ok"]
        # eval.tokens counts tokens: 16 windows of 20 and 8 of 40 bytes; 40 of 8, 20 of 16 BPE
        assert list(frame["tokens"]) == [EVAL_TEXT] * 2, name
        assert list(frame["max_context"]) == list(frame["eval_length"]), name
        nats = frame["loss"] * frame["tokens"]
        expected = nats / math.log(2) / frame["bytes"]
        assert frame["bpb"].tolist() == pytest.approx(expected.tolist(), rel=1e-9)
    assert list(frames["byte"]["bytes"]) == [EVAL_TEXT] * 2
    bpe_bytes = frames["bpe"]["bytes"]
    assert bpe_bytes.nunique() == 1 and bpe_bytes[0] > 2 * EVAL_TEXT  # the same text, more of it

    # The BPE's scored targets are that very text, decoded by HF's own decoder from the held-out
    # sets the evaluator cached.
    (tokenizer_file,) = (tmp_path / ".tokenizer_cache").glob("bpe320_*.json")
    hf = Tokenizer.from_file(str(tokenizer_file))
    for length in (8, 16):
        (path,) = (tmp_path / ".eval_cache").glob(f"L{length}_*.safetensors")
        saved = load_file(path)
        text = hf.decode(saved["targets"][saved["mask"]].tolist()).encode()
        assert text == held_out[1 : 1 + bpe_bytes[0]]
    # Evaluated again from the run directory (tokenizer from the cache): the same numbers.
    rows = evaluate_run(SavedRun(bpe), [8, 16])
    assert [r["bpb"] for r in rows] == pytest.approx(frames["bpe"]["bpb"].tolist(), rel=1e-9)
