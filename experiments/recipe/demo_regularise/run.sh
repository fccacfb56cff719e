#!/usr/bin/env bash
# The 5-minute demo against its overfitting (training loss ~1.18, validation ~1.47): dropout on the
# embedding sum and the sublayer outputs only (no attention-probability dropout, which costs steps on
# CPU), at two rates, and a wider model with it. One full `tfamily demo` per row, one after another on
# a quiet machine; the JSON result of each is appended to rows.jsonl.
# Run from the repo root: bash experiments/recipe/demo_regularise/run.sh [VARIANT...]
set -u
HERE=experiments/recipe/demo_regularise
declare -A V=(
  [base]=""
  [drop0.1]="model.dropout=0.1 model.attn_dropout=0.0"
  [drop0.2]="model.dropout=0.2 model.attn_dropout=0.0"
  [d192drop0.2]="model.d_model=192 model.heads.n_heads=6 model.dropout=0.2 model.attn_dropout=0.0"
)
for name in "${@:-base drop0.1 drop0.2 d192drop0.2}"; do
  for v in $name; do
    out=$(mktemp -d)/run
    line=$(.venv/bin/tfamily demo --sample-tokens 0 --json --out "$out" ${V[$v]} | tail -1)
    python3 -c "import json,sys; r=json.loads(sys.argv[2]); r['variant']=sys.argv[1]; print(json.dumps(r))" \
      "$v" "$line" >> $HERE/rows.jsonl
    python3 -c "import json,sys; r=json.loads(sys.argv[1]); print(sys.argv[2], r.get('steps'), round(r.get('tokens_per_s',0)), r.get('val_loss'))" "$line" "$v"
  done
done
