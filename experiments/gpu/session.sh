#!/usr/bin/env bash
# One GPU lease, in priority order: the recipe rows (member vs nanoGPT's definition on identical
# batches, the GPT-2 recipe's step time through `tfamily train --compile`, the speedrun config),
# then the attention rows against FlexAttention's floor. Each part has its own time limit so one
# failure or overrun leaves the others. Run from the repo root with the data in .gpu_data/:
#   bash experiments/gpu/session.sh   (writes $OUT/log.txt and $OUT/results.tgz)
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 TFAMILY_DATA=$PWD/.gpu_data TFAMILY_NATIVE=0
R=/tmp/gpu_results; mkdir -p $R
T="python3 -m tfamily.cli"
{
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())"; git log --oneline -1
echo "== recipe: member vs nanoGPT definition, nanoGPT's train_shakespeare_char, 1500 steps, bf16, compiled"
timeout 130 $T bench recipe --device cuda --precision bf16 --compile --threads 0 --models tfamily nanogpt \
  --d-model 384 --layers 6 --heads 6 --seq-len 256 --batch 64 --steps 1500 --warmup 100 --dropout 0.2 \
  --eval-every 250 --seeds 0 --out $R/recipe_gpu
echo "== train: GPT-2 recipe through tfamily train --compile (step time)"
timeout 75 $T train -c gpt-shakespeare --compile train.max_steps=1500 train.eval_every=null train.eval_tokens=null \
  train.ckpt_every=null train.tensorboard=false train.progress=false train.log_every=10 --out /tmp/runs/gpt2 \
  && cp /tmp/runs/gpt2/result.json $R/train_gpt2_result.json && cp /tmp/runs/gpt2/train.csv $R/train_gpt2_train.csv
echo "== speedrun: time to val 1.47 (whole split, every 50 steps)"
timeout 70 $T train -c shakespeare-speedrun train.time_budget=null train.max_steps=700 train.progress=false \
  --out /tmp/runs/speed0 && cp /tmp/runs/speed0/result.json $R/speedrun_result.json && cp /tmp/runs/speed0/eval.csv $R/speedrun_eval.csv
echo "== attention vs the FlexAttention floor"
timeout 150 python3 -m tfamily.bench.flex_floor --device cuda --out "$OUT/attention" --budget-s 110
} 2>&1 | tee $OUT/log.txt
tar czf $OUT/results.tgz -C $R .
