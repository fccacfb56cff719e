#!/usr/bin/env bash
# The 2-core CPU rows of docs/results/objectives.md (Al-Rfou's auxiliary losses, ablated one at a time)
# with the current gpt recipe: two shards side by side (one thread each), then the unsharded pass that
# finds every run done and writes the table. From a clean checkout with its venv, on an idle machine:
#   bash experiments/objectives/rerun_cpu.sh OUT
set -euo pipefail
OUT=${1:?usage: rerun_cpu.sh OUT}
export TFAMILY_DATA=${TFAMILY_DATA:-../shared/data}
A="--runs all no_all_positions no_intermediate no_multiple_targets none --time 330 --seq-len 64 --batch-size 16
   --warmup 50 --threads 1 --out $OUT"
date -u +"start %FT%TZ"; git rev-parse --short HEAD
.venv/bin/tfamily repro al-rfou-aux $A --shard 0/2 > "$OUT-shard0.log" 2>&1 &
P0=$!
.venv/bin/tfamily repro al-rfou-aux $A --shard 1/2 > "$OUT-shard1.log" 2>&1 &
P1=$!
wait $P0; echo "shard0 rc $?"; wait $P1; echo "shard1 rc $?"
.venv/bin/tfamily repro al-rfou-aux $A --json > "$OUT.json"
echo "final rc $?"
date -u +"end %FT%TZ"
