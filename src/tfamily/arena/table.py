"""The leaderboard: the finished cells of one or more arena directories, merged, as one table.

``cells.json`` / ``cells.csv`` hold one row per cell (task, member, learning rate, seed);
``leaderboard.json`` / ``.csv`` / ``.md`` one row per (task, member), the mean over its seeds (test
accuracy also with its standard deviation) at the learning rate whose mean validation accuracy is
best (a sweep's other rates are counted in ``lrs`` and their time in ``sweep_s``);
``leaderboard.png`` plots, per task, test accuracy (bits per byte for ``lm``, lower is better)
against training tokens per second with the marker's area following peak memory (LRA's Figure 3
layout). Tokens per second and peak memory come from ``speed.json`` (``speed.py``: every member
timed alternating in one process, with the machine named) where a directory has one
(``speed_from`` = ``alternating``), else from the cells' own training (``cells``).
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from ..bench.results import write_rows

CELL_FIELDS = ["task", "member", "seed", "lr", "length", "params", "d_ff", "steps", "metric", "test_acc", "val_acc",
               "test_bpc", "val_bpc", "val_loss", "train_loss", "train_s", "flops_per_step", "train_flops",
               "tokens_per_s", "peak_mb", "stopped", "resumed", "precision", "threads", "device"]
FIELDS = ["task", "member", "length", "seeds", "params", "d_ff", "lr", "lrs", "steps", "metric", "test_acc",
          "test_acc_std", "val_acc", "test_bpc", "test_bpc_std", "val_bpc", "train_s", "sweep_s", "train_flops",
          "tokens_per_s", "peak_mb", "speed_from", "machine"]


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


def _spread(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.stdev(values) if len(values) > 1 else 0.0 if values else None


def better(row: dict, than: dict) -> bool:
    """Is ``row``'s mean validation score better than ``than``'s (accuracy higher, bpc lower)?"""
    if row.get("metric") == "bpc":
        return (row["val_bpc"] if row["val_bpc"] is not None else float("inf")) < \
            (than["val_bpc"] if than["val_bpc"] is not None else float("inf"))
    return (row["val_acc"] or 0.0) > (than["val_acc"] or 0.0)


def summarize(cells: list[dict], speed: list[dict] | None = None) -> list[dict]:
    """One row per (task, member), in the order they first appear: means over seeds at the learning
    rate of the best mean validation score (ties: the first rate). ``speed``: rows of
    ``speed.json``, whose tokens/s and peak memory replace the cells' own."""
    groups: dict[tuple, list[dict]] = {}
    for c in cells:
        groups.setdefault((c["task"], c["member"], c.get("lr")), []).append(c)
    best: dict[tuple, dict] = {}
    for (task, member, lr), cs in groups.items():
        row = {"task": task, "member": member, "length": cs[0]["length"], "seeds": len(cs), "params": cs[0]["params"],
               "d_ff": cs[0].get("d_ff"), "lr": lr, "steps": _mean([c["steps"] for c in cs]),
               "metric": cs[0].get("metric", "acc"),
               **{k: _mean([c.get(k) for c in cs]) for k in ("test_acc", "val_acc", "test_bpc", "val_bpc", "train_s",
                                                               "train_flops", "tokens_per_s", "peak_mb")},
               "test_acc_std": _spread([c.get("test_acc") for c in cs]),
               "test_bpc_std": _spread([c.get("test_bpc") for c in cs]), "speed_from": "cells", "machine": None}
        key = (task, member)
        sweep = sum(c["train_s"] or 0.0 for c in cs)
        if key not in best:
            best[key] = {**row, "lrs": 1, "sweep_s": sweep}
            continue
        old = best[key]
        kept = row if better(row, old) else old
        best[key] = {**kept, "lrs": old["lrs"] + 1, "sweep_s": old["sweep_s"] + sweep}
    measured = {(r["task"], r["member"]): r for r in speed or []}
    for key, row in best.items():
        if key in measured:
            m = measured[key]
            row.update(tokens_per_s=m["tokens_per_s"], peak_mb=m["peak_mb"], speed_from="alternating",
                       machine=m.get("machine"))
    return list(best.values())


def _tried(row: dict) -> str:
    return f" (best of {row['lrs']})" if row.get("lrs", 1) > 1 else ""


def _f(v, spec: str) -> str:
    return "" if v is None else format(v, spec)


def score(row: dict, which: str = "test") -> str:
    """A row's test (or val) score as printed: accuracy in % (± spread over seeds), or bits per
    byte with "bpc" (lower is better)."""
    if row.get("metric") == "bpc":
        spread = f" ± {row['test_bpc_std']:.3f}" if which == "test" and row.get("test_bpc_std") is not None else ""
        return f"{_f(row.get(f'{which}_bpc'), '.3f')}{spread} bpc"
    acc = row.get(f"{which}_acc")
    spread = f" ± {100 * row['test_acc_std']:.1f}" if which == "test" and row.get("test_acc_std") is not None else ""
    return "" if acc is None else f"{100 * acc:.1f}{spread}"


def markdown(rows: list[dict]) -> str:
    head = ("| task | member | length | seeds | params | d_ff | lr | steps | test acc % (or bpc) | val | train s "
            "| train TFLOP | tokens/s | peak MiB |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    lines = [f"| {r['task']} | {r['member']} | {r['length']} | {r['seeds']} | {r['params']:,} "
             f"| {_f(r.get('d_ff'), 'd')} | {_f(r.get('lr'), 'g')}{_tried(r)} | {_f(r['steps'], '.0f')} "
             f"| {score(r)} | {score(r, 'val')} | {_f(r['train_s'], '.1f')} "
             f"| {_f(r.get('train_flops') and r['train_flops'] / 1e12, '.3g')} "
             f"| {_f(r['tokens_per_s'], ',.0f')} | {_f(r['peak_mb'], '.0f')} |" for r in rows]
    machines = sorted({r["machine"] for r in rows if r.get("speed_from") == "alternating" and r.get("machine")})
    note = (f"\ntokens/s and peak MiB: every member's training step timed alternating in one process "
            f"(`tfamily arena speed`) on {'; '.join(machines)}.\n" if machines else "")
    return "\n".join([head, *lines]) + "\n" + note


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(dict.fromkeys(r["task"] for r in rows))
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4), squeeze=False)
    top = max([r["peak_mb"] or 0 for r in rows] + [1e-9])
    for ax, task in zip(axes[0], names):
        mine = [r for r in rows if r["task"] == task]
        bpc = mine[0].get("metric") == "bpc"
        for r in mine:
            y = r["test_bpc"] if bpc else 100 * r["test_acc"]
            ax.scatter(r["tokens_per_s"], y, s=40 + 400 * (r["peak_mb"] or 0) / top, alpha=0.6)
            ax.annotate(r["member"], (r["tokens_per_s"], y), fontsize=8)
        ax.set(title=f"{task} (length {mine[0]['length']})", xlabel="training tokens/s",
               ylabel="test bits per byte (lower is better)" if bpc else "test accuracy %")
    fig.suptitle("arena: accuracy against speed (marker area: peak memory)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def load_speed(dirs: list[str | Path]) -> list[dict]:
    """The rows of every ``speed.json`` in ``dirs`` (``tfamily arena speed``); a later directory's
    row for a (task, member) wins."""
    rows: dict[tuple, dict] = {}
    for d in dirs:
        path = Path(d) / "speed.json"
        if path.is_file():
            rows.update({(r["task"], r["member"]): r for r in json.loads(path.read_text())})
    return list(rows.values())


def write(out: str | Path, cells: list[dict], speed: list[dict] | None = None) -> list[dict]:
    """Write the cell rows, the leaderboard and its plot under ``out``; return the leaderboard.
    ``speed``: alternating measurements (``load_speed``) for the speed and memory columns."""
    out = Path(out)
    rows = summarize(cells, speed)
    write_rows(out, "cells", cells, CELL_FIELDS)
    write_rows(out, "leaderboard", rows, FIELDS)
    (out / "leaderboard.md").write_text(markdown(rows))
    if rows:
        plot(rows, out / "leaderboard.png")
    return rows
