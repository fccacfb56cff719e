#!/usr/bin/env bash
# The "short sequences" table of docs/results/sparse.md with the current presets (every member its base
# recipe plus its paper's changes). From a clean checkout with its venv, on an idle machine:
#   bash experiments/sparse/rerun_short.sh OUT
set -euo pipefail
OUT=${1:?usage: rerun_short.sh OUT}
export TFAMILY_DATA=${TFAMILY_DATA:-../shared/data}
date -u +"start %FT%TZ"; git rev-parse --short HEAD
.venv/bin/tfamily repro sparse-text --steps 1500 --batch-size 8 --precision bf16 --threads 2 \
  --members gpt sparse_transformer_strided sparse_transformer_fixed longformer bigbird --out "$OUT" --json > "$OUT.json"
date -u +"end %FT%TZ"
