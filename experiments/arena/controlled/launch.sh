#!/usr/bin/env bash
# The arena-cpu table under the controlled protocol (every member gpt's recipe with only its attention):
# two one-thread shards at once, one per core, then the unsharded command, which finds every cell done
# and measures the speed and memory columns alternating in one process (run that last step on an idle machine).
set -euo pipefail
OUT=${1:-runs/arena/controlled}
T=.venv/bin/tfamily
export TFAMILY_DATA=${TFAMILY_DATA:-$(cd ../shared/data && pwd)}
nice -n 10 $T arena --preset arena-cpu --out "$OUT" --shard 0/2 --speed-rounds 0 > "$OUT.shard0.log" 2>&1 &
nice -n 10 $T arena --preset arena-cpu --out "$OUT" --shard 1/2 --speed-rounds 0 > "$OUT.shard1.log" 2>&1 &
wait
$T arena --preset arena-cpu --out "$OUT" > "$OUT.final.log" 2>&1
