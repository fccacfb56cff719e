#!/usr/bin/env bash
# The long convergence runs of issues 14 and 16 on one GPU, all at once: every model of
# `repro reverse-dictionary`, three runs of `repro al-rfou-aux` and the Transformer, UT and UT + ACT of
# `repro ut-algorithmic` on each task, each in its own process with one CPU thread, each for the same
# TIME seconds of training (default 330) while they share the GPU.
# Usage: scripts/long_runs_gpu.sh OUT_DIR [DEVICE]   ($TFAMILY_DATA must name the data directory;
# ONLY=regex runs the matching names alone; QUICK=1 shrinks every size so the script can be dry-run on a CPU; TIME=seconds per run;
# RD_STEPS=N gives every reverse-dictionary model N steps, capped at TIME seconds: equal steps where they fit).
# Each run writes OUT_DIR/<name>.out (its --json table), OUT_DIR/<name>.log and its files under
# OUT_DIR/<repro>/<name>; OUT_DIR/rc.txt gets one exit status per run.
set -u
out=${1:?usage: scripts/long_runs_gpu.sh OUT_DIR [DEVICE]}
dev=${2:-cuda}
T=${TIME:-330}
: "${TFAMILY_DATA:?set TFAMILY_DATA to the data directory}"
mkdir -p "$out"
if [ "${QUICK:-0}" = 1 ]; then
  rd="--d-model 32 --layers 1 --eval-pairs 8 --beam 2 --val-tokens 500"
  ar="--layers 4 --d-model 32 --seq-len 32 --batch-size 4 --curve-every 2 --curve-chars 256 --eval-chars 2000"
  ua="--d-model 16 --heads 2 --depth 2 --test-len 60 --eval-sequences 8"
else
  rd="--batch-size 128"
  ar="--layers 12 --d-model 128 --heads 4 --seq-len 128 --batch-size 32 --warmup 200 --curve-every 500"
  ua="--eval-sequences 512 --eval-batch 128"
fi
launch() {  # NAME ARGS...: one repro in the background, capped at TIME + 200 s
  local name=$1; shift
  [[ $name =~ ${ONLY:-.} ]] || return 0  # ONLY=regex: rerun a subset
  ( timeout $((T + 200)) python3 -m tfamily.cli repro "$@" --threads 1 --device "$dev" --json \
      >"$out/$name.out" 2>"$out/$name.log"; echo "$name rc=$?" >>"$out/rc.txt" ) &
}
for m in lstm luong_dot luong_general luong_concat bahdanau transformer ut; do
  if [ -n "${RD_STEPS:-}" ]; then rbudget="--steps $RD_STEPS --time-cap $T"; else rbudget="--time $T"; fi
  launch "revdict_$m" reverse-dictionary --models $m $rbudget $rd --out "$out/revdict/$m"
done
for r in all none no_intermediate; do
  launch "alrfou_$r" al-rfou-aux --runs $r --time "$T" $ar --out "$out/alrfou/$r"
done
for t in copy reverse addition; do
  for m in lstm transformer ut ut_act; do
    launch "utalg_${t}_$m" ut-algorithmic --tasks $t --models $m --time "$T" --steps 10000000 $ua \
      --out "$out/utalg/${t}_$m"
  done
done
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu')"
wait
cat "$out/rc.txt"
