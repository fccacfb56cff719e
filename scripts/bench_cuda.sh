#!/usr/bin/env bash
# The GPU rows of docs/results/ (training, generation, attention): bench train, peers, generate and attention on one GPU.
# Usage: scripts/bench_cuda.sh OUT_DIR [DEVICE]   (DEVICE defaults to cuda; QUICK=1 shrinks every size
# so the script can be dry-run on a CPU). Each bench is capped by `timeout` so one slow part cannot
# take the others' time; the JSON rows land in OUT_DIR, the console output in OUT_DIR/log.txt.
set -u
out=${1:?usage: scripts/bench_cuda.sh OUT_DIR [DEVICE]}
dev=${2:-cuda}
mkdir -p "$out"
work=$(mktemp -d)
tf() { python3 -m tfamily.cli "$@"; }
q=${QUICK:-0}
if [ "$q" = 1 ]; then
  train_args="--d-model 64 --layers 2 --seq-len 32 --batch 2 --min-time 0.2 --matmul-size 128"
  peers_args="--shapes 64:2:2:32:2 --rounds 1 --steps 1 --matmul-size 128"
  gen_args="--d-model 64 --layers 2 --new-tokens 16 --batches 1 2 --rounds 1"
  att_args="--seq-lens 256 --patterns sliding_window --heads 2"
  cap=120
else
  train_args="--min-time 4 --matmul-size 8192"
  peers_args="--rounds 4 --steps 5 --matmul-size 8192"
  gen_args="--batches 1 8 --rounds 2"
  att_args="--seq-lens 4096 16384 --heads 8 --patterns sliding_window longformer bigbird local_1d strided_heads fixed_heads"
  cap=120
fi
{
  python3 -c "import torch; print('torch', torch.__version__, 'device', torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu')"
  echo "== bench train"; timeout $cap python3 -m tfamily.cli bench train --device $dev $train_args --out $work/train
  echo "== bench peers"; timeout $cap python3 -m tfamily.cli bench peers --device $dev $peers_args --out $work/peers
  echo "== bench generate"; timeout $cap python3 -m tfamily.cli bench generate --device $dev $gen_args --out $work/generate
  echo "== bench attention (flex)"; timeout $((cap + 60)) python3 -m tfamily.cli bench attention --device $dev --kernel flex \
      --block-size 128 $att_args --out $work/attention_flex
} 2>&1 | tee "$out/log.txt"
for f in train/train peers/peers generate/generate attention_flex/attention; do
  [ -f "$work/$f.json" ] && cp "$work/$f.json" "$out/$(echo $f | tr / _).json"
done
ls "$out"
