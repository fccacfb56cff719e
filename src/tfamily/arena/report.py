"""`tfamily arena report DIR`: one self-contained HTML page of an arena directory (or of several
shards' directories, merged as ``arena merge`` merges them).

The page holds, in order: the leaderboard, one table per task (``table.summarize``: means over
seeds at the best learning rate, best first, the columns of the task's metric, the majority-class
line, ``†`` beside a parameter count allowed past 10% of the first member's), test accuracy against training tokens per second with peak memory as the marker's
area (LRA's Figure 3 layout), one bar chart per task (test accuracy with its spread over seeds,
tokens per second, peak memory, side by side), each cell's learning curve (training loss per
step from the cell's ``train.csv``, validation loss from its ``eval.csv`` as dots), and the cells
of each task (its metric's fields only). The figures are PNGs inlined as base64, so the page is one file that opens offline.
"""
from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from ..base.plotting import pyplot
from . import table

STYLE = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;color:#222}"
         "table{border-collapse:collapse;font-size:13px;margin:1em 0}"
         "th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}th{background:#f3f3f3}"
         "td:first-child,th:first-child{text-align:left}img{max-width:100%}.wide{overflow-x:auto}")


def _img(data: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'


def _png(fig, alt: str) -> str:
    plt = pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return _img(buf.getvalue(), alt)


def scatter(rows: list[dict]) -> str:
    """Accuracy against tokens/s, marker area by peak memory: ``table.plot``, inlined."""
    pyplot()
    buf = io.BytesIO()
    table.plot(rows, buf)
    return _img(buf.getvalue(), "test accuracy against training tokens per second")


def bars(rows: list[dict], task: str) -> str:
    """One task's members side by side: test accuracy (± std over seeds), tokens/s, peak MiB."""
    plt = pyplot()
    mine = [r for r in rows if r["task"] == task]
    names = [r["member"] for r in mine]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.2))  # one title (the task's); each panel names its quantity
    quality = (("test bits per byte (lower is better)", [r["test_bpc"] for r in mine],
                [r["test_bpc_std"] or 0 for r in mine]) if mine[0].get("metric") == "bpc" else
               ("test accuracy %", [100 * r["test_acc"] for r in mine], [100 * (r["test_acc_std"] or 0) for r in mine]))
    panels = (quality,
              ("training tokens/s", [r["tokens_per_s"] or 0 for r in mine], None),
              ("peak MiB", [r["peak_mb"] or 0 for r in mine], None))
    for ax, (label, values, err) in zip(axes, panels):
        ax.bar(range(len(mine)), values, yerr=err, capsize=3, color="tab:blue")
        ax.set_xticks(range(len(mine)), names, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel(label, fontsize=9)
    fig.suptitle(f"{task} (length {mine[0]['length']})", fontsize=10)
    fig.tight_layout()
    return _png(fig, f"{task}: accuracy, speed and memory per member")


def _read(path: Path, key: str) -> tuple[list[int], list[float]]:
    from ..train.metrics import read_csv
    if not path.is_file():
        return [], []
    rows = [r for r in read_csv(path) if r.get(key) not in (None, "")]
    return [int(r["step"]) for r in rows], [float(r[key]) for r in rows]


def curves(cells: list[dict], dirs: dict[tuple, Path]) -> str:
    """Each cell's training loss per step (line) and validation loss (dots), one panel per task."""
    plt = pyplot()
    names = list(dict.fromkeys(c["task"] for c in cells))
    fig, axes = plt.subplots(1, len(names), figsize=(6 * len(names), 4), squeeze=False)
    for ax, task in zip(axes[0], names):
        mine = [c for c in cells if c["task"] == task]
        sweep = len({c.get("lr") for c in mine}) > 1
        for c in mine:
            d = dirs[_key(c)]
            lr = f" lr {c['lr']:g}" if sweep else ""
            (line,) = ax.plot(*_read(d / "train.csv", "loss"), lw=1, label=f"{c['member']}{lr} s{c['seed']}")
            ax.plot(*_read(d / "eval.csv", "loss"), "o", color=line.get_color(), ms=4)
        ax.set(title=f"{task}: training loss (line), validation loss (dots)", xlabel="step", ylabel="loss")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return _png(fig, "learning curves of every cell")


def _key(c: dict) -> tuple:
    return c["task"], c["member"], c.get("lr"), c["seed"]


def html_table(rows: list[dict], fields: list[str]) -> str:
    def cell(r: dict, f: str) -> str:
        v = r.get(f)
        if f == "params" and r.get("params_off") is not None:
            return html.escape(f"{v:,}{table.MARK}")
        if isinstance(v, float):
            return f"{v:,.4g}" if abs(v) < 1 else f"{v:,.1f}"
        return html.escape("" if v is None else f"{v:,}" if isinstance(v, int) else str(v))
    head = "".join(f"<th>{html.escape(f)}</th>" for f in fields)
    body = "".join("<tr>" + "".join(f"<td>{cell(r, f)}</td>" for f in fields) + "</tr>" for r in rows)
    return f"<div class='wide'><table><tr>{head}</tr>{body}</table></div>"


def leaderboard(rows: list[dict]) -> str:
    """The leaderboard as ``table.markdown`` writes it: one table per task, its metric's columns."""
    parts = []
    for task in dict.fromkeys(r["task"] for r in rows):
        mine = [r for r in rows if r["task"] == task]
        cols = table.columns(mine[0].get("metric", "acc"))
        base = table.majority(mine)
        lines = [[text(r) for _, _, text in cols] for r in mine]
        if base is not None:
            lines.append([base["member"], table.score(base)] + [""] * (len(cols) - 2))
        head = "".join(f"<th>{html.escape(h)}</th>" for h, _, _ in cols)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in line) + "</tr>" for line in lines)
        parts.append(f"<h3>{html.escape(table.heading(mine))}</h3><div class='wide'><table><tr>{head}</tr>{body}"
                     f"</table></div>")
    return "".join(parts) + "".join(f"<p>{html.escape(n)}</p>" for n in table.notes(rows))


def cell_fields(metric: str) -> list[str]:
    """The cells table's fields for a task scored by ``metric`` (the other metric's are always empty)."""
    other = ("test_acc", "val_acc", "majority_acc") if metric == "bpc" else ("test_bpc", "val_bpc")
    return [f for f in table.CELL_FIELDS if f not in other and f not in ("task", "metric")]


def cell_dirs(dirs: list[str | Path]) -> dict[tuple, Path]:
    """(task, member, lr, seed) -> the cell's run directory, for every finished cell of ``dirs``."""
    from .files import read_cell
    out = {}
    for d in dirs:
        for path in sorted(Path(d).glob("*/*/cell.json")):
            out[_key(read_cell(path))] = path.parent
    return out


def write(dirs: list[str | Path], out: str | Path) -> Path:
    """The report of the finished cells of ``dirs`` at ``out`` (an .html file)."""
    cells = table.collect(dirs)
    if not cells:
        raise ValueError(f"no finished arena cells (<task>/<member>-s<seed>/cell.json) under "
                         f"{' '.join(map(str, dirs))}; pass the --out directory of a `tfamily arena` run")
    rows = table.summarize(cells, table.load_speed(dirs))
    machine = sorted({f"{c.get('device')}, {c.get('precision')}, {c.get('threads')} thread(s)" for c in cells})
    timed = sorted({r["machine"] for r in rows if r["speed_from"] == "alternating" and r.get("machine")})
    speed = (f"Tokens/s and peak memory: every member's training step timed alternating in one process on "
             f"{'; '.join(timed)} (<code>tfamily arena speed</code>)." if timed else
             "Tokens/s and peak memory come from the cells' own training: compare them only between cells run one "
             "after another on one machine (<code>tfamily arena speed DIR</code> measures them alternating).")
    parts = [f"<h1>Arena: {len(rows)} (task, member) rows from {len(cells)} cells</h1>",
             f"<p>From {html.escape(', '.join(map(str, dirs)))}; cells ran on {html.escape('; '.join(machine))}. "
             f"{speed}</p>",
             "<h2>Leaderboard</h2>", leaderboard(rows),
             "<h2>Accuracy against speed (marker area: peak memory)</h2>", scatter(rows),
             "<h2>Per task</h2>", *(bars(rows, t) for t in dict.fromkeys(r["task"] for r in rows)),
             "<h2>Learning curves</h2>", curves(cells, cell_dirs(dirs)),
             "<h2>Cells</h2>", *(f"<h3>{html.escape(t)}</h3>" + html_table(
                 [c for c in cells if c["task"] == t],
                 cell_fields(next(c.get("metric", "acc") for c in cells if c["task"] == t)))
                 for t in dict.fromkeys(c["task"] for c in cells))]
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>arena report</title><style>{STYLE}</style>"
            f"</head><body>{''.join(parts)}</body></html>\n")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out
