#!/usr/bin/env bash
# The README's "Compare two members" recipe as printed (equal time, 5 minutes), 3 seeds, against the
# controlled comparison (equal steps, the longformer's attention on gpt's recipe: the arena's protocol).
# Run on an otherwise idle machine, one run at a time (the recipe compares at equal time).
set -euo pipefail
T=${T:-.venv/bin/tfamily}
CORPUS=${CORPUS:-tinyshakespeare}
OUT=${OUT:-runs/compare-recipe}
STEPS=${STEPS:-1500}
mkdir -p "$OUT"
for seed in 0 1 2; do
  for m in gpt longformer; do
    $T train --member $m data.corpus=$CORPUS --time 5m train.seed=$seed --out "$OUT/recipe-$m-s$seed" --json \
      > "$OUT/recipe-$m-s$seed.json"
  done
  # equal steps; longformer with gpt's recipe and only its attention (what `tfamily arena` trains)
  $T train --member gpt data.corpus=$CORPUS --steps $STEPS train.seed=$seed --out "$OUT/steps-gpt-s$seed" --json \
    > "$OUT/steps-gpt-s$seed.json"
  $T train --member longformer data.corpus=$CORPUS --steps $STEPS train.seed=$seed \
    'model.position={name: learned, params: {}}' --out "$OUT/steps-longformer-s$seed" --json \
    > "$OUT/steps-longformer-s$seed.json"
done
$T compare "$OUT"/recipe-*-s0 --out "$OUT/recipe.png"
$T compare "$OUT"/steps-*-s0 --out "$OUT/steps.png"
