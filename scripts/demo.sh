#!/usr/bin/env bash
# make demo: the field's best-known effect in a few CPU minutes.
# Trains a tiny byte-level LM on this Python's stdlib sources at 64 tokens with four encodings,
# evaluates each at 64, 128, 256 and 512 tokens, prints the comparison table, and writes the
# plots (PNG + SVG), a Markdown table and a self-contained HTML page next to the runs.
set -euo pipefail
cd "$(dirname "$0")/.."
POSX="${POSX:-.venv/bin/posx}"
OUT="results/demo/$(date +%Y%m%d-%H%M%S)"
"$POSX" train -m experiment=demo encoding=nope,sinusoidal,rope,alibi \
    "hydra.sweep.dir=$OUT" "$@"
"$POSX" report --root "$OUT" --plot "$OUT/plots" --output "$OUT/report.html"
"$POSX" report --root "$OUT" --format md --output "$OUT/table.md" >/dev/null
echo "Results in $OUT"
echo "  plots:  $OUT/plots/ (length_*, positions_*, heatmap_*, training_*; .png and .svg)"
echo "  page:   $OUT/report.html (tables and plots in one file)"
echo "  table:  $OUT/table.md"
echo "Expect sinusoidal's bits/byte to climb past the training length (64) while alibi's stays flat."
