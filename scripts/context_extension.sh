#!/usr/bin/env bash
# The context-extension study (configs/experiment/context_extension.yaml) in one command:
# RoPE bases at 64 bytes (3 seeds), each fine-tuned to 256 by every method of
# configs/extension/, then the table and the claims' verdicts (docs/context_extension.md).
#
#   scripts/context_extension.sh [ROOT] [overrides of the bases...]
#   scripts/context_extension.sh results/ce model=small train.length=512 extend.length=2048
set -euo pipefail
root="${1:-results/context_extension}"
shift || true
posx="${POSX:-posx}"
# two jobs at a time, one thread each (`make install` has the joblib launcher); JOBS="" runs
# one job at a time with every thread
read -r -a jobs <<< "${JOBS-hydra/launcher=local_parallel hydra.launcher.n_jobs=2 train.threads=1}"
# 1. the bases: one sweep, 3 seeds, evaluated plain and with eval-time scaling (no fine-tuning)
$posx train -m experiment=context_extension "root=$root" "${jobs[@]}" "$@"
# 2. every base under ROOT, fine-tuned by each method (the bases' overrides carry over)
$posx extend -m "$root" extension=pi,ntk,yarn,longrope,pose,plain,control "${jobs[@]}"
# 3. base and extended runs in one table per metric, and the papers' claims judged
$posx report --root "$root" --by train_length
$posx check "$root"
