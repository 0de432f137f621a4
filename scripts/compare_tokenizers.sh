#!/usr/bin/env bash
# Byte-level vs BPE on the same corpus at the same bytes of context: nope/rope/alibi trained on
# this Python's stdlib sources, bytes at 64 tokens (= 64 bytes) and a 4096-token BPE at 19 tokens
# (64 / 3.40 bytes per token = 18.8), each evaluated at 1x, 2x, 4x and 8x its training length.
# eval.tokens counts each run's own tokens: 19456 bytes for the byte runs and 5776 BPE tokens
# (about 19.6 kB of the same held-out text) for the BPE runs, each a multiple of every length, so
# every eval length of one tokenizer scores the same held-out bytes and the bits-per-byte table
# compares like with like. A batch of 32 windows holds about
# 2 kB of text either way, so equal steps train on equal text. STEPS (default 150) sets the length
# of training; extra arguments go to both `posx train` calls.
set -euo pipefail
cd "$(dirname "$0")/.."
POSX="${POSX:-.venv/bin/posx}"
PYTHON="${PYTHON:-.venv/bin/python}"
OUT="${OUT:-results/tokenizers/$(date +%Y%m%d-%H%M%S)}"
STEPS="${STEPS:-150}"
COMMON=(experiment=demo encoding=nope,rope,alibi "train.steps=$STEPS" "root=$OUT")
"$POSX" train -m "${COMMON[@]}" task=text eval.tokens=19456 train.length=64 "eval.lengths=[64,128,256,512]" \
    "hydra.sweep.dir=$OUT/sweeps/byte" "$@"
"$POSX" train -m "${COMMON[@]}" task=text_bpe task.vocab_size=4096 eval.tokens=5776 train.length=19 \
    "eval.lengths=[19,38,76,152]" "hydra.sweep.dir=$OUT/sweeps/bpe" "$@"
"$PYTHON" - "$OUT" <<'PY'
import sys
from pathlib import Path

import pandas as pd

rows = pd.concat(pd.read_csv(p) for p in Path(sys.argv[1]).rglob("eval.csv"))
scored = rows.groupby("task")["bytes"].nunique()
assert (scored == 1).all(), f"runs of one tokenizer scored different held-out text: {scored}"
rows["x"] = (rows["eval_length"] // rows["train_length"]).astype(str) + "x"
rows["tokenizer"] = rows["task"].map({"text": "byte", "text_bpe": "bpe4096"})
table = rows.pivot_table(index=["encoding", "tokenizer", "train_length"], columns="x", values="bpb")
table["8x/1x"] = table["8x"] / table["1x"]
held = rows.groupby("tokenizer")["bytes"].first().astype(int).to_dict()
print(f"bits per byte; held-out bytes scored per tokenizer: {held}")
cols = ["1x", "2x", "4x", "8x", "8x/1x"]
print("| encoding | tokenizer | train length | " + " | ".join(cols) + " |")
print("|---|---|---|" + "---|" * len(cols))
for (enc, tok, length), r in table.iterrows():
    print(f"| {enc} | {tok} | {length} | " + " | ".join(f"{r[c]:.3f}" for c in cols) + " |")
for tok, part in table.groupby(level="tokenizer"):
    order = part["8x"].sort_values().index.get_level_values("encoding")
    print(f"{tok}: best to worst at 8x: {' < '.join(order)}")
PY
echo "Results in $OUT"
