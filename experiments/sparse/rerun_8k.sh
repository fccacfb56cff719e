#!/usr/bin/env bash
# The "time to bpc at context 8K" rows of docs/results/sparse.md with the current presets (every member
# its base recipe plus its paper's changes). Run from a clean checkout with its venv, on an idle machine:
#   bash experiments/sparse/rerun_8k.sh OUT
set -euo pipefail
OUT=${1:?usage: rerun_8k.sh OUT}
export TFAMILY_DATA=${TFAMILY_DATA:-../shared/data}
date -u +"start %FT%TZ"; git rev-parse --short HEAD
.venv/bin/tfamily repro sparse-text --corpus kjv --seq-len 8192 --time 5m --batch-size 1 --d-model 128 \
  --layers 2 --heads 4 --members gpt sparse_transformer_strided --eval-every 20 --eval-tokens 32768 \
  --threads 2 --precision fp32 --out "$OUT" --json > "$OUT.json"
date -u +"end %FT%TZ"
