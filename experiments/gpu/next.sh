#!/usr/bin/env bash
# GPU lease, second call (about 6 minutes), after experiments/gpu/recipe.sh: the CUDA test suite,
# FSDP resuming a 2-rank CPU checkpoint, and the Reformer/XL benches on the device.
# Before the lease, on the CPU: make the 2-rank FSDP checkpoint that the GPU resumes, and carry it:
#   torchrun --standalone --nproc_per_node=2 -m tfamily.cli train member=gpt model.d_model=64 \
#     model.depth.n_layers=2 model.dropout=0.0 train.parallel=fsdp train.device=cpu train.precision=fp32 \
#     train.max_steps=4 train.warmup=0 train.min_lr_ratio=1.0 train.out=.gpu_data/fsdp2cpu
# Then: run(command="bash experiments/gpu/next.sh", carry=[".gpu_data"], timeout_s=480)
# The arena's GPU row is experiments/gpu/arena.sh (about 3 minutes), if time is left.
source experiments/gpu/common.sh
{
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())"
echo "== make test-cuda: kernels, members, cache, checkpoints and the device-side checks on the GPU"
timeout 200 make test-cuda PY=python3
echo "== FSDP: one rank resumes the 2-rank CPU checkpoint (weights_bitwise, optimizer_bitwise), then trains"
timeout 90 torchrun --standalone --nproc_per_node=1 tests/train/test_fsdp.py .gpu_data/fsdp2cpu 14 train.device=cuda
timeout 60 torchrun --standalone --nproc_per_node=1 -m tfamily.cli train member=gpt train.parallel=fsdp \
  train.device=cuda train.max_steps=50 train.out=/tmp/runs/fsdp1
echo "== Reformer and XL benches on the GPU"
timeout 80 $T bench lsh --device cuda --lengths 4096 16384 65536 --max-dense-len 65536 --out $R/lsh
timeout 60 $T bench reversible --device cuda --depths 2 8 24 --out $R/reversible
timeout 60 $T bench xl-eval --device cuda --out $R/xl_eval
} 2>&1 | tee $OUT/log.txt
tar czf $OUT/results.tgz -C $R .
