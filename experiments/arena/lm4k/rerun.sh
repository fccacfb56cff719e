#!/usr/bin/env bash
# The arena's lm row at length 4,096 (docs/results/arena.md) under the current protocol (every member its
# base recipe plus its paper's attention): two shards side by side, then the unsharded pass that trains
# what is left and writes the leaderboard and the speed columns. From a clean checkout with its venv:
#   bash experiments/arena/lm4k/rerun.sh OUT
set -euo pipefail
OUT=${1:?usage: rerun.sh OUT}
export TFAMILY_DATA=${TFAMILY_DATA:-../shared/data}
A="--tasks lm --length lm=4096 --steps 200 --batch-size 4 --lr 2e-3 --eval-examples 16 --threads 1 --out $OUT"
date -u +"start %FT%TZ"; git rev-parse --short HEAD
.venv/bin/tfamily arena $A --shard 0/2 > "$OUT-shard0.log" 2>&1 &
P0=$!
.venv/bin/tfamily arena $A --shard 1/2 > "$OUT-shard1.log" 2>&1 &
P1=$!
wait $P0; echo "shard0 rc $?"; wait $P1; echo "shard1 rc $?"
.venv/bin/tfamily arena $A > "$OUT-final.log" 2>&1
echo "final rc $?"
date -u +"end %FT%TZ"
