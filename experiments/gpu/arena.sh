#!/usr/bin/env bash
# GPU lease, if time is left after recipe.sh and next.sh (about 3 minutes): the arena on CUDA.
#   run(command="bash experiments/gpu/arena.sh", carry=[".gpu_data"], timeout_s=240)
source experiments/gpu/common.sh
{
echo "== arena on the GPU: ListOps at LRA's length (2K), the five default members as encoders, one seed"
timeout 150 $T arena --tasks listops --length listops=2048 --steps 1000 --batch-size 32 --seeds 1 \
  --device cuda --precision bf16 --out $R/arena_listops2k
} 2>&1 | tee $OUT/log.txt
tar czf $OUT/results.tgz -C $R .
