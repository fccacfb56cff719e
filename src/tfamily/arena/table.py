"""The leaderboard: the finished cells of one or more arena directories, merged, as one table.

``cells.json`` / ``cells.csv`` hold one row per cell (task, member, learning rate, seed);
``leaderboard.json`` / ``.csv`` one row per (task, member), the mean over its seeds (test accuracy
also with its standard deviation, when there are several seeds) at the learning rate whose mean
validation accuracy is best (a sweep's other rates are counted in ``lrs``, their time in
``sweep_s`` and their training FLOPs per seed in ``sweep_flops``); ``leaderboard.md`` one table per
task, members best test score first, only the columns of the task's metric, with the line of a
majority-class classifier, and a ``†`` beside a parameter count more than 10% from the first
member's (``params_off``, only with ``--allow-param-mismatch``). Cells merge into one table only
when they may (``check_alike``). ``leaderboard.png`` plots, per task, test accuracy (bits per byte
for ``lm``, lower is better) against training tokens per second with the marker's area following
peak memory (LRA's Figure 3 layout). Tokens per second and peak memory come from ``speed.json``
(``speed.py``: every member timed alternating in one process, with the machine named) where a
directory has one (``speed_from`` = ``alternating``), else from the cells' own training
(``cells``).
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from ..bench.results import write_rows
from .files import read_cell, read_speed
from ..base.plotting import pyplot

CELL_FIELDS = ["task", "member", "seed", "lr", "length", "params", "params_off", "d_ff", "steps", "metric",
               "test_acc", "val_acc", "test_bpc", "val_bpc", "val_loss", "train_loss", "train_s", "flops_per_step",
               "train_flops", "tokens_per_s", "peak_mb", "majority_acc", "stopped", "resumed", "precision", "threads", "device"]
FIELDS = ["task", "member", "length", "seeds", "params", "params_off", "d_ff", "lr", "lrs", "steps", "metric",
          "test_acc", "test_acc_std", "val_acc", "test_bpc", "test_bpc_std", "val_bpc", "majority_acc", "train_s",
          "sweep_s", "train_flops", "sweep_flops", "tokens_per_s", "peak_mb", "speed_from", "machine"]


def collect(dirs: list[str | Path], keep=None) -> list[dict]:
    """Every finished cell (``<dir>/<task>/<member>-s<seed>/cell.json``) of ``dirs`` (``keep``: only
    the rows it accepts); a cell found in two directories is refused (shards of one grid hold
    disjoint cells), and so are cells that may not share a table (``check_alike``)."""
    rows: dict[tuple, tuple[Path, dict]] = {}
    for d in dirs:
        if not Path(d).is_dir():
            raise FileNotFoundError(f"arena directory {d} does not exist; pass the --out of an arena run")
        for path in sorted(Path(d).glob("*/*/cell.json")):
            row = read_cell(path)
            if keep is not None and not keep(row):
                continue
            key = (row["task"], row["member"], row.get("lr"), row["seed"])
            if key in rows:
                raise ValueError(f"cell {path.parent.parent.name}/{path.parent.name} is in both {rows[key][0]} and "
                                 f"{path.parent}; merge the shards of one grid, each cell once")
            rows[key] = (path.parent, row)
    check_alike([(d, r) for d, r in rows.values()])
    return [r for _, r in sorted(rows.values(),
                                 key=lambda pr: (pr[1]["task"], pr[1]["member"], pr[1].get("lr") or 0, pr[1]["seed"]))]


# What every member of a task's table must share, with the flag that sets it: a table compares
# members, so their cells must differ in nothing else.
SHARED = {"length": "--length", "d_model": "--d-model", "n_layers": "--layers", "n_heads": "--heads",
          "batch_size": "--batch-size", "steps": "--steps", "time": "--time", "flops": "--flops",
          "precision": "--precision", "base": "the base recipe"}


def _differ(found: list[tuple[Path, dict]], keys) -> str:
    """'key (value in DIR, value in DIR)' for each of ``keys`` on which the plans of ``found`` differ."""
    out = []
    for k in keys:
        seen: dict[str, Path] = {}
        for d, plan in found:
            seen.setdefault(json.dumps(plan.get(k), sort_keys=True), d)
        if len(seen) > 1:
            out.append(f"{SHARED.get(k, k)} ({', '.join(f'{v} in {d}' for v, d in seen.items())})")
    return "; ".join(out)


def check_alike(found: list[tuple[Path, dict]]) -> None:
    """Refuse, naming the keys and where each value comes from, cells of one (task, member, learning
    rate) whose plans differ in anything but the seed (their mean would mix settings), and cells of
    one task whose shared settings (``SHARED``) differ (one table, one setting)."""
    from ..train.grid import PLAN, read_plan
    plans = [(d, read_plan(d)) for d, _ in found if (Path(d) / PLAN).is_file()]
    groups: dict[tuple, list] = {}
    for d, plan in plans:
        groups.setdefault((plan.get("task"), plan.get("member"), plan.get("lr")), []).append((d, plan))
    for (task, member, lr), mine in groups.items():
        keys = sorted({k for _, p in mine for k in p} - {"seed"})
        if diff := _differ(mine, keys):
            raise ValueError(f"the seeds of {task} {member} at lr {lr} were planned differently: {diff}; their "
                             f"mean would mix settings: merge only the cells of one grid")
    tasks: dict[str, list] = {}
    for d, plan in plans:
        tasks.setdefault(plan.get("task"), []).append((d, plan))
    for task, mine in tasks.items():
        if diff := _differ(mine, SHARED):
            raise ValueError(f"the cells of {task} differ in {diff}; one table compares members at one setting: "
                             f"merge the directories of grids run alike, or write their tables apart")


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def _spread(values: list) -> float | None:
    """The standard deviation over seeds; None for one seed (there is no spread to print)."""
    values = [v for v in values if v is not None]
    return statistics.stdev(values) if len(values) > 1 else None


def better(row: dict, than: dict) -> bool:
    """Is ``row``'s mean validation score better than ``than``'s (accuracy higher, bpc lower)?"""
    if row.get("metric") == "bpc":
        return (row["val_bpc"] if row["val_bpc"] is not None else float("inf")) < \
            (than["val_bpc"] if than["val_bpc"] is not None else float("inf"))
    return (row["val_acc"] or 0.0) > (than["val_acc"] or 0.0)


def _rank(row: dict) -> float:
    """Sort key within a task: the best test score first (accuracy high, bpc low), unscored last."""
    if row.get("metric") == "bpc":
        return row["test_bpc"] if row.get("test_bpc") is not None else float("inf")
    return -row["test_acc"] if row.get("test_acc") is not None else float("inf")


def summarize(cells: list[dict], speed: list[dict] | None = None) -> list[dict]:
    """One row per (task, member), tasks in the order they first appear, each task's members best
    test score first: means over seeds at the learning rate of the best mean validation score
    (ties: the first rate). A sweep's spend counts every rate: ``sweep_s`` (seconds of all its
    cells) and ``sweep_flops`` (training FLOPs per seed, all rates). ``speed``: rows of
    ``speed.json``, whose tokens/s and peak memory replace the cells' own."""
    groups: dict[tuple, list[dict]] = {}
    for c in cells:
        groups.setdefault((c["task"], c["member"], c.get("lr")), []).append(c)
    best: dict[tuple, dict] = {}
    for (task, member, lr), cs in groups.items():
        row = {"task": task, "member": member, "length": cs[0]["length"], "seeds": len(cs), "params": cs[0]["params"],
               "params_off": cs[0].get("params_off"), "d_ff": cs[0].get("d_ff"), "lr": lr,
               "steps": _mean([c["steps"] for c in cs]), "metric": cs[0].get("metric", "acc"),
               **{k: _mean([c.get(k) for c in cs]) for k in ("test_acc", "val_acc", "test_bpc", "val_bpc", "train_s",
                                                               "train_flops", "tokens_per_s", "peak_mb")},
               "test_acc_std": _spread([c.get("test_acc") for c in cs]),
               "test_bpc_std": _spread([c.get("test_bpc") for c in cs]), "majority_acc": cs[0].get("majority_acc"),
               "speed_from": "cells", "machine": None, "base": cs[0].get("base")}
        key = (task, member)
        sweep, flops = sum(c["train_s"] or 0.0 for c in cs), row["train_flops"]
        if key not in best:
            best[key] = {**row, "lrs": 1, "sweep_s": sweep, "sweep_flops": flops}
            continue
        old = best[key]
        kept = row if better(row, old) else old
        total = None if flops is None or old["sweep_flops"] is None else old["sweep_flops"] + flops
        best[key] = {**kept, "lrs": old["lrs"] + 1, "sweep_s": old["sweep_s"] + sweep, "sweep_flops": total}
    measured = {(r["task"], r["member"]): r for r in speed or []}
    for key, row in best.items():
        if key in measured:
            m = measured[key]
            row.update(tokens_per_s=m["tokens_per_s"], peak_mb=m["peak_mb"], speed_from="alternating",
                       machine=m.get("machine"))
    order = {t: i for i, t in enumerate(dict.fromkeys(r["task"] for r in best.values()))}
    return sorted(best.values(), key=lambda r: (order[r["task"]], _rank(r)))


def _f(v, spec: str) -> str:
    return "" if v is None else format(v, spec)


def score(row: dict, which: str = "test") -> str:
    """A row's test (or val) score as printed: accuracy in % (± spread over seeds, when there are
    several), or bits per byte with "bpc" (lower is better)."""
    if row.get("metric") == "bpc":
        spread = f" ± {row['test_bpc_std']:.3f}" if which == "test" and row.get("test_bpc_std") is not None else ""
        return f"{_f(row.get(f'{which}_bpc'), '.3f')}{spread} bpc"
    acc = row.get(f"{which}_acc")
    spread = f" ± {100 * row['test_acc_std']:.1f}" if which == "test" and row.get("test_acc_std") is not None else ""
    return "" if acc is None else f"{100 * acc:.1f}{spread}"


MARK = "†"  # beside a parameter count more than 10% from the first member's (--allow-param-mismatch)


def _lr(row: dict) -> str:
    from .grid import lr_text
    lr = "" if row.get("lr") is None else lr_text(row["lr"])
    return f"{lr} (best of {row['lrs']})" if row.get("lrs", 1) > 1 else lr


def _params(row: dict) -> str:
    return f"{row['params']:,}{MARK if row.get('params_off') is not None else ''} ({_f(row.get('d_ff'), 'd')})"


def _per_seed(row: dict, key: str) -> float | None:
    """Seconds or FLOPs of one seed, every learning rate of a sweep counted."""
    if key == "s":
        return None if row.get("sweep_s") is None else row["sweep_s"] / row["seeds"]
    return row.get("sweep_flops", row.get("train_flops"))


def columns(metric: str) -> list[tuple[str, str, callable]]:
    """The leaderboard's columns for a task scored by ``metric``: (header, markdown alignment, cell text)."""
    if metric == "bpc":
        quality = [("test bits per byte", "---:", lambda r: score(r).removesuffix(" bpc")),
                   ("validation bits per byte", "---:", lambda r: score(r, "val").removesuffix(" bpc"))]
    else:
        quality = [("test accuracy %", "---:", score), ("validation accuracy %", "---:", lambda r: score(r, "val"))]
    return [("member", "---", lambda r: r["member"]), *quality,
            ("parameters (d_ff)", "---:", _params), ("learning rate", "---:", _lr),
            ("steps", "---:", lambda r: _f(r["steps"], ".0f")),
            ("training TFLOP", "---:", lambda r: _f(_per_seed(r, "flops") and _per_seed(r, "flops") / 1e12, ".3g")),
            ("training s", "---:", lambda r: _f(_per_seed(r, "s"), ".1f")),
            ("tokens/s", "---:", lambda r: _f(r["tokens_per_s"], ",.0f")),
            ("peak MiB", "---:", lambda r: _f(r["peak_mb"], ".0f"))]


def majority(rows: list[dict]) -> dict | None:
    """The line of a constant classifier (the validation set's most frequent class, scored on the
    test set) for a task's rows, or None (a language task, or cells that did not record it)."""
    if rows[0].get("metric") == "bpc":
        return None
    acc = next((r["majority_acc"] for r in rows if r.get("majority_acc") is not None), None)
    return None if acc is None else {"member": "majority class", "metric": "acc", "test_acc": acc, "params": 0}


def heading(rows: list[dict]) -> str:
    """A task's title: its name, length, seeds and how it is scored."""
    seeds = sorted({r["seeds"] for r in rows})
    how = "test bits per byte, lower is better" if rows[0].get("metric") == "bpc" else "test accuracy, higher is better"
    base = {"attention": "; each member's attention on gpt's recipe",
            "papers": "; each member as its paper (--as-papers)"}.get(rows[0].get("base"), "")
    return (f"{rows[0]['task']} (length {rows[0]['length']}, {'/'.join(map(str, seeds))} "
            f"seed{'s' if seeds != [1] else ''}; {how}{base})")


def notes(rows: list[dict]) -> list[str]:
    """The footnotes the rows need: the parameter mark, what a sweep's columns count, the speed source."""
    out = []
    off = [r for r in rows if r.get("params_off") is not None]
    if off:
        which = ", ".join(f"{r['task']} {r['member']} {100 * r['params_off']:+.0f}%" for r in off)
        out.append(f"{MARK} parameters more than 10% from the first member's ({which}): trained with "
                   f"--allow-param-mismatch, so the score is not at a matched size.")
    if any(r.get("lrs", 1) > 1 for r in rows):
        out.append("With several learning rates: scores and steps are those of the rate best on validation; "
                   "training TFLOP and seconds are per seed and count every rate tried.")
    machines = sorted({r["machine"] for r in rows if r.get("speed_from") == "alternating" and r.get("machine")})
    if machines:
        out.append(f"tokens/s and peak MiB: every member's training step timed alternating in one process "
                   f"(`tfamily arena speed`) on {'; '.join(machines)}.")
    return out


def markdown(rows: list[dict]) -> str:
    """One table per task, its metric's columns only, best first, with the majority-class line."""
    parts = []
    for task in dict.fromkeys(r["task"] for r in rows):
        mine = [r for r in rows if r["task"] == task]
        cols = columns(mine[0].get("metric", "acc"))
        lines = [f"### {heading(mine)}", "", "| " + " | ".join(h for h, _, _ in cols) + " |",
                 "|" + "|".join(a for _, a, _ in cols) + "|"]
        lines += ["| " + " | ".join(text(r) for _, _, text in cols) + " |" for r in mine]
        base = majority(mine)
        if base is not None:
            lines.append("| " + " | ".join([base["member"], score(base)] + [""] * (len(cols) - 2)) + " |")
        parts.append("\n".join(lines) + "\n")
    foot = notes(rows)
    return "\n".join(parts) + ("\n" + "\n".join(foot) + "\n" if foot else "")


def plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
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
        # one title per panel: the page or file around it names the figure (marker area: peak memory)
        ax.set(title=f"{task} (length {mine[0]['length']}); marker area: peak memory", xlabel="training tokens/s",
               ylabel="test bits per byte (lower is better)" if bpc else "test accuracy %")
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
            rows.update({(r["task"], r["member"]): r for r in read_speed(path)})
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
