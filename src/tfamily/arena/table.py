"""The leaderboard: the finished cells of one or more arena directories, merged, as one table.

``cells.json`` / ``cells.csv`` hold one row per cell (task, member, learning rate, seed);
``leaderboard.json`` / ``.csv`` / ``.md`` one row per (task, member), the mean over its seeds (test
accuracy also with its standard deviation) at the learning rate whose mean validation accuracy is
best (a sweep's other rates are counted in ``lrs`` and their time in ``sweep_s``);
``leaderboard.png`` plots, per task, test accuracy against training tokens per second with the
marker's area following peak memory (LRA's Figure 3 layout).
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from ..bench.results import write_rows

CELL_FIELDS = ["task", "member", "seed", "lr", "length", "params", "d_ff", "steps", "test_acc", "val_acc", "val_loss",
               "train_loss", "train_s", "tokens_per_s", "peak_mb", "stopped", "resumed", "precision", "threads", "device"]
FIELDS = ["task", "member", "length", "seeds", "params", "d_ff", "lr", "lrs", "steps", "test_acc", "test_acc_std",
          "val_acc", "train_s", "sweep_s", "tokens_per_s", "peak_mb"]


def collect(dirs: list[str | Path]) -> list[dict]:
    """Every finished cell (``<dir>/<task>/<member>-s<seed>/cell.json``) of ``dirs``; a cell found in
    two directories is refused (shards of one grid hold disjoint cells)."""
    rows: dict[tuple, tuple[Path, dict]] = {}
    for d in dirs:
        if not Path(d).is_dir():
            raise FileNotFoundError(f"arena directory {d} does not exist; pass the --out of an arena run")
        for path in sorted(Path(d).glob("*/*/cell.json")):
            row = json.loads(path.read_text())
            key = (row["task"], row["member"], row.get("lr"), row["seed"])
            if key in rows:
                raise ValueError(f"cell {path.parent.parent.name}/{path.parent.name} is in both {rows[key][0]} and "
                                 f"{path.parent}; merge the shards of one grid, each cell once")
            rows[key] = (path.parent, row)
    return [r for _, r in sorted(rows.values(),
                                 key=lambda pr: (pr[1]["task"], pr[1]["member"], pr[1].get("lr") or 0, pr[1]["seed"]))]


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def summarize(cells: list[dict]) -> list[dict]:
    """One row per (task, member), in the order they first appear: means over seeds at the learning
    rate of the best mean validation accuracy (ties: the first rate)."""
    groups: dict[tuple, list[dict]] = {}
    for c in cells:
        groups.setdefault((c["task"], c["member"], c.get("lr")), []).append(c)
    best: dict[tuple, dict] = {}
    for (task, member, lr), cs in groups.items():
        accs = [c["test_acc"] for c in cs]
        row = {"task": task, "member": member, "length": cs[0]["length"], "seeds": len(cs), "params": cs[0]["params"],
               "d_ff": cs[0].get("d_ff"), "lr": lr, "steps": _mean([c["steps"] for c in cs]), "test_acc": _mean(accs),
               "test_acc_std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
               **{k: _mean([c[k] for c in cs]) for k in ("val_acc", "train_s", "tokens_per_s", "peak_mb")}}
        key = (task, member)
        sweep = sum(c["train_s"] or 0.0 for c in cs)
        if key not in best:
            best[key] = {**row, "lrs": 1, "sweep_s": sweep}
            continue
        old = best[key]
        kept = row if (row["val_acc"] or 0.0) > (old["val_acc"] or 0.0) else old
        best[key] = {**kept, "lrs": old["lrs"] + 1, "sweep_s": old["sweep_s"] + sweep}
    return list(best.values())


def _tried(row: dict) -> str:
    return f" (best of {row['lrs']})" if row.get("lrs", 1) > 1 else ""


def markdown(rows: list[dict]) -> str:
    head = ("| task | member | length | seeds | params | d_ff | lr | steps | test acc % | val acc % | train s "
            "| tokens/s | peak MiB |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def f(v, spec: str) -> str:
        return "" if v is None else format(v, spec)
    lines = [f"| {r['task']} | {r['member']} | {r['length']} | {r['seeds']} | {r['params']:,} "
             f"| {f(r.get('d_ff'), 'd')} "
             f"| {f(r.get('lr'), 'g')}{_tried(r)} "
             f"| {f(r['steps'], '.0f')} "
             f"| {100 * r['test_acc']:.1f} ± {100 * r['test_acc_std']:.1f} | {f(r['val_acc'] and 100 * r['val_acc'], '.1f')} "
             f"| {f(r['train_s'], '.1f')} | {f(r['tokens_per_s'], ',.0f')} | {f(r['peak_mb'], '.0f')} |" for r in rows]
    return "\n".join([head, *lines]) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(dict.fromkeys(r["task"] for r in rows))
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4), squeeze=False)
    top = max([r["peak_mb"] or 0 for r in rows] + [1e-9])
    for ax, task in zip(axes[0], names):
        mine = [r for r in rows if r["task"] == task]
        for r in mine:
            ax.scatter(r["tokens_per_s"], 100 * r["test_acc"], s=40 + 400 * (r["peak_mb"] or 0) / top, alpha=0.6)
            ax.annotate(r["member"], (r["tokens_per_s"], 100 * r["test_acc"]), fontsize=8)
        ax.set(title=f"{task} (length {mine[0]['length']})", xlabel="training tokens/s", ylabel="test accuracy %")
    fig.suptitle("arena: accuracy against speed (marker area: peak memory)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(out: str | Path, cells: list[dict]) -> list[dict]:
    """Write the cell rows, the leaderboard and its plot under ``out``; return the leaderboard."""
    out = Path(out)
    rows = summarize(cells)
    write_rows(out, "cells", cells, CELL_FIELDS)
    write_rows(out, "leaderboard", rows, FIELDS)
    (out / "leaderboard.md").write_text(markdown(rows))
    if rows:
        plot(rows, out / "leaderboard.png")
    return rows
