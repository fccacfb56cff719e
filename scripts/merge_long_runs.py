"""Merge the per-process results of scripts/long_runs_gpu.sh into one table per repro and one plot.

Usage: python scripts/merge_long_runs.py DEST RUN_DIR [RUN_DIR ...]
Later RUN_DIRs win where a name ran twice (a rerun of a failed subset). Writes DEST/summary.md,
DEST/summary.json and, for the repros present, DEST/al_rfou_curves.png (validation bpc against
steps and seconds, one line per run), DEST/ut_algorithmic.png (char and sequence accuracy at the
test lengths per task and model, the paper's as markers) and DEST/reverse_dictionary.png (exact
match and validation loss per model).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from tfamily.base.plotting import pyplot


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
        plt = pyplot()

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
    _plot_bars(dest, rows)
    print((dest / "summary.md").read_text())


def _plot_bars(dest: Path, rows: dict[str, dict]) -> None:
    """One bar chart per repro with rows: ut-algorithmic (task x model, paper markers) and
    reverse-dictionary (model: greedy and beam exact match, validation loss)."""
    ua = {k: r for k, r in rows.items() if k.startswith("utalg_")}
    rd = {k: r for k, r in rows.items() if k.startswith("revdict_")}
    if not ua and not rd:
        return
    plt = pyplot()

    if ua:
        tasks = [t for t in ("copy", "reverse", "addition") if any(r["task"] == t for r in ua.values())]
        models = [m for m in ("lstm", "transformer", "ut", "ut_act") if any(r["model"] == m for r in ua.values())]
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        w = 0.8 / len(models)
        for ax, (key, label) in zip(axes, (("char_acc", "char accuracy"), ("seq_acc", "sequence accuracy"))):
            for j, m in enumerate(models):
                for i, t in enumerate(tasks):
                    r = next((r for r in ua.values() if r["task"] == t and r["model"] == m), None)
                    if r is None:
                        continue
                    x = i + (j - (len(models) - 1) / 2) * w
                    ax.bar(x, r[key], w, color=f"C{j}", label=m if i == 0 else None)
                    if r.get(f"paper_{key}") is not None:
                        ax.plot(x, r[f"paper_{key}"], "k_", ms=12, mew=2, label="paper" if (i, j) == (0, 0) else None)
            ax.set(xticks=range(len(tasks)), xticklabels=tasks, ylabel=f"{label} at the test lengths", ylim=(0, 1))
            ax.grid(axis="y", alpha=0.3)
        axes[0].legend()
        steps = sorted({r["steps"] for r in ua.values()})
        fig.suptitle(f"ut-algorithmic: {steps[0]:,}-{steps[-1]:,} steps per model (black: the paper's UT/Transformer/LSTM)")
        fig.tight_layout()
        fig.savefig(dest / "ut_algorithmic.png", dpi=100)
        plt.close(fig)
    if rd:
        names = sorted(rd, key=lambda k: rd[k]["val_loss"])
        labels = [f"{rd[k]['model']}\n{rd[k]['steps']:,} steps" for k in names]
        fig, axes = plt.subplots(1, 2, figsize=(14, 4))
        x = range(len(names))
        axes[0].bar([i - 0.2 for i in x], [rd[k]["greedy_exact"] for k in names], 0.4, label="greedy")
        axes[0].bar([i + 0.2 for i in x], [rd[k].get("beam_exact", 0.0) for k in names], 0.4, label="beam")
        axes[0].set(ylabel="exact match (test headwords)")
        axes[0].legend()
        axes[1].bar(list(x), [rd[k]["val_loss"] for k in names], 0.6, color="C2")
        axes[1].set(ylabel="validation loss (nats per target token)")
        for ax in axes:
            ax.set_xticks(list(x), labels, fontsize=7)
            ax.grid(axis="y", alpha=0.3)
        fig.suptitle("reverse dictionary (GCIDE definition -> headword)")
        fig.tight_layout()
        fig.savefig(dest / "reverse_dictionary.png", dpi=100)
        plt.close(fig)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
