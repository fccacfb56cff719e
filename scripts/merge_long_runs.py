"""Merge the per-process results of scripts/long_runs_gpu.sh into one table per repro and one plot.

Usage: python scripts/merge_long_runs.py DEST RUN_DIR [RUN_DIR ...]
Later RUN_DIRs win where a name ran twice (a rerun of a failed subset). Writes DEST/summary.md,
DEST/summary.json and DEST/al_rfou_curves.png (validation bpc against steps and seconds, one
line per run).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def _rows(run_dirs: list[Path]) -> dict[str, dict]:
    rows: dict[str, dict] = {}
    for d in run_dirs:
        for f in sorted(d.glob("*.out")):
            try:
                row = json.loads(f.read_text())[0]
            except (json.JSONDecodeError, IndexError):
                continue  # a run that failed there: its .log says why
            row.pop("examples", None)
            rows[f.stem] = {**row, "source": d.name}
    return rows


def _curves(run_dirs: list[Path]) -> dict[str, list[dict]]:
    curves = {}
    for d in run_dirs:
        for f in sorted(d.glob("alrfou/*/curves.json")):
            data = json.loads(f.read_text())
            for row in (data if isinstance(data, list) else data.get("rows", [])):
                curves.setdefault(row["run"], []).append(row)
    return curves


def main(dest: Path, run_dirs: list[Path]) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    rows, curves = _rows(run_dirs), _curves(run_dirs)
    (dest / "summary.json").write_text(json.dumps({"rows": rows, "al_rfou_curves": curves}, indent=1))
    lines = ["| run | steps | train s | result |", "|---|---|---|---|"]
    for name, r in sorted(rows.items()):
        if name.startswith("revdict"):
            res = (f"val loss {r['val_loss']:.3f}, greedy exact {r['greedy_exact']:.3f} char {r['greedy_char']:.3f}, "
                   f"beam exact {r['beam_exact']:.3f} char {r['beam_char']:.3f}, params {r['params']:,}")
            secs = r["train_s"]
        elif name.startswith("alrfou"):
            res, secs = f"val bpc {r['val_bpc']:.3f} over {r['val_chars']:,} chars (paper {r['paper_bpc']})", r["train_s"]
        else:
            res = (f"char {r['char_acc']:.3f} seq {r['seq_acc']:.3f} (paper {r['paper_char_acc']}/"
                   f"{r['paper_seq_acc']}), final loss {r['final_loss']:.3f}, params {r['params']:,}")
            secs = r["train_seconds"]
        lines.append(f"| {name} ({r['source']}) | {r['steps']:,} | {secs:.0f} | {res} |")
    (dest / "summary.md").write_text("\n".join(lines) + "\n")
    if curves:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for run, pts in sorted(curves.items()):
            axes[0].plot([p["step"] for p in pts], [p["val_bpc"] for p in pts], label=run)
            axes[1].plot([p["train_s"] for p in pts], [p["val_bpc"] for p in pts], label=run)
        for ax, x in zip(axes, ("step", "training seconds")):
            ax.set(xlabel=x, ylabel="validation bpc (last layer)")
            ax.grid(alpha=0.3)
        axes[0].legend()
        fig.suptitle("Al-Rfou auxiliary losses, 12-layer d 128 character decoder, Tiny Shakespeare")
        fig.tight_layout()
        fig.savefig(dest / "al_rfou_curves.png", dpi=100)
        plt.close(fig)
    print((dest / "summary.md").read_text())


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
