#!/usr/bin/env bash
# GPU lease, first call (about 8 minutes): the recipe issue's open rows.
#   run(command="bash experiments/gpu/recipe.sh", carry=[".gpu_data"], timeout_s=590)
# .gpu_data/ holds tinyshakespeare.txt and the wheels (common.sh).
source experiments/gpu/common.sh
{
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())"
echo "== GPT-2 recipe step time through tfamily train (target <= 8.1 ms, median of steps 200-1500)"
timeout 75 $T train -c gpt-shakespeare --compile train.max_steps=1500 train.eval_every=null train.eval_tokens=null \
  train.ckpt_every=null train.tensorboard=false train.progress=false --out /tmp/runs/gpt2 \
  && cp /tmp/runs/gpt2/result.json $R/train_gpt2_result.json && cp /tmp/runs/gpt2/train.csv $R/train_gpt2_train.csv
echo "== the same with the non-finite checks read every step (train.check_every=1): what per-step host syncs cost"
timeout 75 $T train -c gpt-shakespeare --compile train.max_steps=1500 train.eval_every=null train.eval_tokens=null \
  train.ckpt_every=null train.tensorboard=false train.progress=false train.check_every=1 --out /tmp/runs/gpt2sync \
  && cp /tmp/runs/gpt2sync/result.json $R/train_gpt2_sync_result.json && cp /tmp/runs/gpt2sync/train.csv $R/train_gpt2_sync_train.csv
echo "== speedrun (target: validation <= 1.47 within 8 s of training, median of 3 seeds), then with dropout"
# On a CPU the config overfits from step ~300 whatever the weight decay (experiments/recipe/speedrun_cpu):
# dropout is the lead, at 0.1 and 0.2, one seed each.
for s in 0 1 2; do
  timeout 60 $T train -c shakespeare-speedrun train.seed=$s train.progress=false \
    --out /tmp/runs/speed_s$s && cp /tmp/runs/speed_s$s/result.json $R/speedrun_seed$s.json
done
for p in 0.1 0.2; do
  timeout 60 $T train -c shakespeare-speedrun model.dropout=$p train.progress=false \
    --out /tmp/runs/speed_drop$p && cp /tmp/runs/speed_drop$p/result.json $R/speedrun_dropout$p.json
done
echo "== the member with the flat peer's choices (no biases, exact GELU) against it, alternating: the member's own overhead"
timeout 110 $T bench recipe --device cuda --precision bf16 --compile --threads 0 --models tfamily nanogpt \
  --member-choices nanogpt --d-model 384 --layers 6 --heads 6 --seq-len 256 --batch 64 --steps 600 --warmup 100 \
  --dropout 0.2 --eval-every 600 --seeds 0 --out $R/recipe_same_choices
} 2>&1 | tee $OUT/log.txt
tar czf $OUT/results.tgz -C $R .
