#!/usr/bin/env bash
# Issue 39 items 1-3 on one GPU (H100/H200), from the repo root, with the image's own python3 and torch:
# tfamily's flex kernel against the plain flex_attention call and dense causal SDPA, every catalogue
# pattern at 16K, 4K, 64K (in that order), bf16, b 1, h 8, e 64, block 128, fwd and fwd+bwd.
# Rows still to run after --budget-s are written as skipped; a failing kernel is recorded in its row.
# Writes DIR/flex_floor.{json,csv,png}, flex_floor_meta.json, flex_floor_profile.txt.
# Usage: experiments/gpu_attention/flex_floor.sh [DIR] [more bench flex-floor options]
set -euo pipefail
DIR="${1:-${OUT:-runs}/attention}"
shift || true
PYTHONPATH=src exec python3 -m tfamily.bench.flex_floor --device cuda --out "$DIR" --budget-s 150 "$@"
