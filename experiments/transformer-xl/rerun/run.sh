#!/usr/bin/env bash
# The transformer-xl page's tables with the current presets (members = base recipe + paper changes):
# gpt / transformer_xl / adaptive_span at 600 steps of 32 x 64 characters (step budget: bpc does not
# depend on the load), XL evaluated with longer memories, the memory-vs-recompute speed-up, spans.
# Run from a clean checkout: bash experiments/transformer-xl/rerun/run.sh OUT
set -euo pipefail
T=${T:-.venv/bin/tfamily}
OUT=${1:-runs/xl-rerun}
mkdir -p "$OUT"
COMMON="model.d_model=128 model.depth.n_layers=4 data.seq_len=64 train.batch_size=32 train.threads=1 train.precision=bf16"
$T train --member gpt $COMMON --steps 600 --out "$OUT/gpt" --json > "$OUT/gpt.json"
$T train --member transformer_xl $COMMON model.state.mem_len=64 --steps 600 --out "$OUT/xl" --json > "$OUT/xl.json"
$T train --member adaptive_span $COMMON model.pattern.params.max_span=256 model.state.mem_len=256 --steps 600 \
  --out "$OUT/span" --json > "$OUT/span.json"
for m in 0 32 64 128 256 512; do
  $T eval "$OUT/xl" --mem-len $m --max-tokens 32768 --threads 1 --json | tail -1 > "$OUT/xl-eval-mem$m.json"
done
$T bench xl-eval --checkpoint "$OUT/xl" --eval-mem-lens 64 192 --tokens 2048 --rows 8 --threads 1 \
  --out "$OUT/bench" --json > "$OUT/bench.json"
$T bench xl-eval --checkpoint "$OUT/xl" --eval-mem-lens 448 --tokens 2048 --rows 8 --threads 1 \
  --out "$OUT/bench512" --json > "$OUT/bench512.json"
$T plot spans "$OUT/span" --out "$OUT/spans.png" --json > "$OUT/spans.json"
