"""Merge the three H200 flex-floor runs (16K + first 4K rows; 64K of four patterns; the other
4K and 64K rows) into one table and one plot for docs/results/attention.md.
Run from the repo root: python experiments/gpu_attention/merge_h200.py"""
import csv
import json
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

HERE = Path(__file__).parent
rows = {}
for run in ("h200", "h200_64k", "h200_rest"):  # later runs replace a repeated (pattern, length)
    for r in json.loads((HERE / run / "flex_floor.json").read_text()):
        if r.get("status") == "ok":
            rows[(r["pattern"], r["seq_len"])] = dict(r, run=run)
rows = [rows[k] for k in sorted(rows)]
keys = ["pattern", "seq_len", "density", "a_fwd_ms", "b_fwd_ms", "a_fwd_bwd_ms", "b_fwd_bwd_ms", "dense_fwd_bwd_ms",
        "a_vs_b_fwd", "a_vs_b_fwd_bwd", "a_vs_dense_fwd_bwd", "a_tile_vs_dense", "b_tile_vs_dense", "a_peak_mb",
        "max_abs_diff", "grad_rel_diff", "run"]
with open(HERE / "h200_all.csv", "w", newline="") as f:
    w = csv.DictWriter(f, keys, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
patterns = sorted({r["pattern"] for r in rows})
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
for ax, key, title in ((axes[0], "a_vs_b_fwd_bwd", "tfamily flex / plain flex_attention (fwd+bwd)"),
                       (axes[1], "a_vs_dense_fwd_bwd", "tfamily flex / dense causal SDPA (fwd+bwd)")):
    for j, L in enumerate((4096, 16384, 65536)):
        vals = [next((r[key] for r in rows if r["pattern"] == p and r["seq_len"] == L), float("nan")) for p in patterns]
        ax.bar([i + 0.27 * (j - 1) for i in range(len(patterns))], vals, 0.27, label=f"{L // 1024}K")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(patterns)), patterns, rotation=40, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
fig.suptitle("H200, bf16, b 1, h 8, d_head 64, block 128 (torch 2.11)", fontsize=9)
fig.tight_layout()
fig.savefig(HERE.parent.parent / "docs/results/img/attention_flex_h200.png", dpi=110)
print(f"{len(rows)} rows")
