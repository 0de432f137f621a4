"""A byte-level and a BPE run on one corpus: bits per byte over the same held-out text.

Both runs train 5 steps and are evaluated at two lengths with the same ``n·L`` (320 bytes of
validation text), so the BPE run scores fewer tokens but exactly the same bytes; the bytes are
counted here from the raw file, independently of posx.
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
from posx.runs.launch import train_and_evaluate

WORDS = ["the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "a", "on"]
EVAL_TEXT = 320  # bytes: eval.tokens, a multiple of every eval length (byte 20, 40; BPE 8, 16)
TINY = [
    "model.d_model=32",
    "model.n_layers=1",
    "model.n_heads=4",
    "model.d_ff=64",
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


@pytest.mark.slow  # ~4 s in a warm session, ~14 s alone (imports)
def test_byte_and_bpe_runs_report_bits_per_byte_over_the_same_text(tmp_path, corpus):
    byte = train_run(tmp_path, corpus, "byte", 20)
    bpe = train_run(tmp_path, corpus, "bpe", 8, "task.tokenizer=bpe", "task.vocab_size=320")
    data = corpus.read_bytes()
    held_out = data[int(len(data) * 0.9) :][1 : 1 + EVAL_TEXT]  # counted from the file
    frames = {r.name: pd.read_csv(r / "eval.csv") for r in (byte, bpe)}
    for frame in frames.values():
        assert list(frame["status"]) == ["ok", "ok"]
        assert list(frame["bytes"]) == [len(held_out)] * 2
        nats = frame["loss"] * frame["tokens"]
        expected = nats / math.log(2) / len(held_out)
        assert frame["bpb"].tolist() == pytest.approx(expected.tolist(), rel=1e-9)
    assert list(frames["byte"]["tokens"]) == [EVAL_TEXT] * 2  # 16 windows of 20, 8 of 40
    assert all(frames["bpe"]["tokens"] < EVAL_TEXT / 2)  # same text, fewer tokens

    # The BPE's scored targets are that very text, decoded by HF's own decoder from the held-out
    # sets the evaluator cached.
    (tokenizer_file,) = (tmp_path / ".tokenizer_cache").glob("bpe320_*.json")
    hf = Tokenizer.from_file(str(tokenizer_file))
    for length in (8, 16):
        (path,) = (tmp_path / ".eval_cache").glob(f"L{length}_*.safetensors")
        saved = load_file(path)
        assert hf.decode(saved["targets"][saved["mask"]].tolist()).encode() == held_out
    # Evaluated again from the run directory (tokenizer from the cache): the same numbers.
    rows = evaluate_run(bpe, [8, 16])
    assert [r["bpb"] for r in rows] == pytest.approx(frames["bpe"]["bpb"].tolist(), rel=1e-9)
