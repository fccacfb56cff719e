#!/usr/bin/env bash
# The GPU checks still open, in priority order, for the next lease (prepared, not yet run).
# Before the lease, on the CPU: make the 2-rank FSDP checkpoint that the GPU resumes, and carry it:
#   torchrun --standalone --nproc_per_node=2 -m tfamily.cli train member=gpt model.d_model=64 \
#     model.depth.n_layers=2 model.dropout=0.0 train.parallel=fsdp train.device=cpu train.precision=fp32 \
#     train.max_steps=4 train.warmup=0 train.min_lr_ratio=1.0 train.out=.gpu_data/fsdp2cpu
# and the wheels of the CLI's pure-Python dependencies the GPU image may lack:
#   pip download --no-deps -d .gpu_data/wheels jsonargparse==4.53.0 omegaconf==2.4.0
# Then: run(command="bash experiments/gpu/next.sh", carry=[".gpu_data"], timeout_s=480)
set -u
pip install --quiet --no-index --no-deps .gpu_data/wheels/*.whl || echo "no wheels carried: the CLI may not start"
export PYTHONPATH=src PYTHONUNBUFFERED=1 TFAMILY_DATA=$PWD/.gpu_data TFAMILY_NATIVE=0
T="python3 -m tfamily.cli"
R=/tmp/gpu_results; mkdir -p $R
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
echo "== speedrun (target: validation <= 1.47 within 8 s of training, median of 3 seeds); then weight decay 0.3"
for wd in 0.1 0.3; do for s in 0 1 2; do
  timeout 60 $T train -c shakespeare-speedrun train.seed=$s train.weight_decay=$wd train.progress=false \
    --out /tmp/runs/speed_wd${wd}_s$s && cp /tmp/runs/speed_wd${wd}_s$s/result.json $R/speedrun_wd${wd}_seed$s.json
done; done
echo "== FSDP: one rank resumes the 2-rank CPU checkpoint (weights_bitwise, optimizer_bitwise), then trains"
timeout 90 torchrun --standalone --nproc_per_node=1 tests/train/test_fsdp.py .gpu_data/fsdp2cpu 14 train.device=cuda
timeout 60 torchrun --standalone --nproc_per_node=1 -m tfamily.cli train member=gpt train.parallel=fsdp \
  train.device=cuda train.max_steps=50 train.out=/tmp/runs/fsdp1
echo "== Reformer and XL benches on the GPU"
timeout 80 $T bench lsh --device cuda --lengths 4096 16384 65536 --max-dense-len 65536 --out $R/lsh
timeout 60 $T bench reversible --device cuda --depths 2 8 24 --out $R/reversible
timeout 60 $T bench xl-eval --device cuda --out $R/xl_eval
echo "== arena on the GPU: ListOps at LRA's length (2K), the five default members as encoders, one seed"
timeout 150 $T arena --tasks listops --length listops=2048 --steps 1000 --batch-size 32 --seeds 1 \
  --device cuda --precision bf16 --out $R/arena_listops2k
} 2>&1 | tee $OUT/log.txt
tar czf $OUT/results.tgz -C $R .
