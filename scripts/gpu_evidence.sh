#!/usr/bin/env bash
# The GPU evidence of one lent device session (issue 58), in one command that ends within its
# limits: the CUDA tests, then `bench-gpu`, then `bench-extend-gpu`, each under its own time limit,
# every table written under $OUT as it finishes (a step stopped at its limit keeps its rows).
#
#   make gpu-deps                                      # here: hydra, omegaconf, antlr4 -> .gpu-deps/
#   bash scripts/gpu_evidence.sh                       # there (carry .gpu-deps); OUT=... to choose
#
# Files (at most 8, two folders deep, as the device tool returns them): log.txt (versions, the
# benchmarks' output, each step's exit status and time), tests.txt (pytest's output),
# bench_gpu/{bench_gpu.csv,cells.csv,table.md}, bench_extend/{bench_extend.csv,bench_extend.md},
# probe/probe.csv. STEPS: which steps, in order (default "tests bench_gpu bench_extend"; "probe" is
# scripts/probe_gpu.py); limits in seconds: TESTS_S, PROBE_S, BENCH_S, EXTEND_S; TESTS_K: pytest's
# -k; TESTS_N: pytest workers (4); ENCODINGS: bench-gpu's rows in the order they run.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-results/gpu_evidence/$(date +%Y%m%d-%H%M%S)}
PY=${PYTHON:-python3}
STEPS=" ${STEPS:-tests bench_gpu bench_extend} "
TESTS_S=${TESTS_S:-90}
PROBE_S=${PROBE_S:-90}
BENCH_S=${BENCH_S:-240}
EXTEND_S=${EXTEND_S:-180}
ENCODINGS=${ENCODINGS:-nope,rope,alibi,rope[fused],t5,fire,kerple_log,xpos,sinusoidal,shaw,shaw[flex],deberta,deberta[flex],transformer_xl,transformer_xl[flex],cope,nope[compile],rope[compile],nope[graphs],rope[graphs],sandwich,learned,alibi_learned,kerple_power,dynamic_bias,complex_order,floater,abacus}
for name in $STEPS; do
  case $name in tests | probe | bench_gpu | bench_extend) ;;
  *) echo "gpu_evidence: unknown step '$name'; steps are tests, probe, bench_gpu, bench_extend" >&2
    exit 2 ;;
  esac
done
export PYTHONPATH="$PWD/.gpu-deps${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
mkdir -p "$OUT"
LOG=$OUT/log.txt

step() {  # step NAME SECONDS FILE COMMAND...: run it under its limit into FILE, log status and time
  local name=$1 secs=$2 file=$3 start rc
  shift 3
  start=$(date +%s)
  echo "== $name: limit ${secs} s, $(date +%T)" | tee -a "$LOG"
  # SIGINT first, so pytest and the benchmarks stop as on Ctrl-C and print what they have
  timeout -s INT -k 20 "$secs" "$@" >>"$file" 2>&1
  rc=$?
  echo "== $name: exit $rc after $(($(date +%s) - start)) s" | tee -a "$LOG"
}

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  "$PY" -c "import sys, torch, transformers; print('python', sys.version.split()[0]);
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpu',
      torch.cuda.get_device_name() if torch.cuda.is_available() else None);
print('transformers', transformers.__version__)"
} >"$LOG" 2>&1
cat "$LOG"

for name in $STEPS; do
  case $name in
  tests)
    step tests "$TESTS_S" "$OUT/tests.txt" "$PY" -m pytest -q -m cuda tests/gpu -p no:cacheprovider \
      -rfE -o "addopts=" -n "${TESTS_N:-4}" --dist load ${TESTS_K:+-k "$TESTS_K"}
    tail -5 "$OUT/tests.txt"
    ;;
  probe) step probe "$PROBE_S" "$LOG" "$PY" scripts/probe_gpu.py --out "$OUT/probe" ;;
  bench_gpu)
    step bench_gpu "$BENCH_S" "$LOG" "$PY" scripts/bench_gpu.py --encodings "$ENCODINGS" \
      --budget $((BENCH_S - 40)) --out "$OUT/bench_gpu"
    ;;
  bench_extend)
    step bench_extend "$EXTEND_S" "$LOG" "$PY" scripts/bench_extend_gpu.py \
      --budget $((EXTEND_S - 25)) --out "$OUT/bench_extend"
    ;;
  esac
done
cat "$OUT/bench_gpu/table.md" "$OUT/bench_extend/bench_extend.md" 2>/dev/null
grep "^== " "$LOG"
