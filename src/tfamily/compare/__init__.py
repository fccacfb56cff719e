"""`tfamily compare RUN...` and `tfamily plot curves RUN...`: finished runs side by side.

Every run the shared loop writes (``train``, ``demo``, ``rl train``, a reproduction's runs) is a
directory with ``result.json`` (the final metrics), ``train.csv`` (one row per logged step) and
``eval.csv`` (one row per evaluation), so one reader serves language models, seq2seq and synthetic
tasks and RL alike. ``compare`` prints a table of the final metrics and draws the curves overlaid;
``plot curves`` only draws them.

The curves are drawn twice: against steps (environment steps for RL, whose optimiser steps depend on
the PPO settings) and against seconds. Seconds are ``train.csv``'s ``elapsed_s``: the run's own clock,
carried across resumes, evaluations and checkpoints included (start-up and model building excluded).
An evaluation is placed at the seconds of its step, read off the training rows.

``compare`` also lists what differs between the runs: each spec field, the data, the vocabulary,
the budget, the seed, the threads and the precision a run ran with. A spec field in which the
members' own presets differ (at the runs' size, not set by a ``model.*`` override) is the members'
own difference, what the comparison is for; anything else makes the gap not the members' alone,
said in one warning line. Runs on different data or vocabularies are drawn in separate panels: a
loss over another text or another set of tokens is another number.

    tfamily compare runs/gpt runs/longformer --out runs/compare.png
    tfamily plot curves runs/gpt runs/longformer --bpc --out bpc.png
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from ..base.plotting import pyplot
from ..settings.commands import Compare, CompareTable
from ..settings.schema import add_flags

DEFAULT_OUT = Compare.out  # the figure's declared default
# Shown first, in this order; then every final val_*/train_* metric any run has.
LEAD = ("member", "env", "seed", "steps", "params", "train_s")
# Not shown: ppl repeats the loss; train_s leads already.
HIDDEN = ("val_ppl", "train_s")


@dataclass(frozen=True)
class Run:
    """One finished run directory, read once."""
    label: str
    path: Path
    result: dict
    config: dict
    train: list[dict]
    evals: list[dict]

    @property
    def rl(self) -> bool:
        return self.result.get("unit") == "env_steps"


def load(path: str | Path) -> Run:
    """The run in ``path``, or a one-line error naming what is missing."""
    from ..base.textload import read_json, read_yaml, require
    from ..train.metrics import read_csv
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"run directory {str(path)!r} does not exist; pass run directories written by "
                                f"`tfamily train`, `tfamily demo` or `tfamily rl train` (their --out)")
    if not (p / "result.json").is_file():
        raise FileNotFoundError(f"{str(path)!r} has no result.json, so it is not a finished run; pass a run "
                                f"directory whose training ended (a killed run finishes with "
                                f"`tfamily train --resume {path}`)")
    result = read_json(p / "result.json")
    config = read_yaml(p / "config.yaml") if (p / "config.yaml").is_file() else {}
    # The fields read below, checked here: a hand-edited file is one line naming it, never an AttributeError.
    fix = "the file is corrupt or hand-edited: rerun or drop the run"
    for key, kind in (("member", str), ("unit", str), ("steps", int), ("params", int), ("tokens", int),
                      ("train_s", (int, float)), ("threads", int), ("precision", str)):
        require(result, key, (kind, type(None)) if isinstance(kind, type) else (*kind, type(None)),
                str(p / "result.json"), None, fix=fix)
    for key, kind in (("member", (str, type(None))), ("size", (str, type(None))), ("data", dict), ("train", dict),
                      ("model", dict)):
        require(config, key, kind, str(p / "config.yaml"), None, fix=fix)
    rows = [read_csv(p / name) if (p / name).is_file() else [] for name in ("train.csv", "eval.csv")]
    return Run(str(path).rstrip("/") or str(path), p, result, config, rows[0], rows[1])


def _number(v):
    """A finite number from result.json, or None (null, NaN, text, bool)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def return_curve(run: Run) -> tuple[list[int], list[float], list[float]]:
    """RL: (environment steps, seconds, batch-mean return), one point per rollout."""
    from ..train.metrics import rollout_returns
    xs, ys = rollout_returns(run.path)
    return xs, _seconds_at(xs, run, key="tokens"), ys


def row(run: Run) -> dict:
    """The run's final metrics: the lead columns, then each numeric val_* / train_* of result.json."""
    res = run.result
    out = {"run": run.label, "member": res.get("member"), "seed": run.config.get("train", {}).get("seed"),
           "steps": res.get("steps"), "params": res.get("params"), "train_s": _number(res.get("train_s")),
           "unit": res.get("unit", "tokens"), "tokens": res.get("tokens")}
    if run.rl:
        xs, _, ys = return_curve(run)
        out.update(env=run.config.get("data", {}).get("task"), env_steps=res.get("tokens"),
                   final_return=ys[-1] if ys else None, max_return=max(ys) if ys else None)
    for k, v in res.items():
        if k.startswith(("val_", "train_")) and k not in HIDDEN and k not in out:
            out[k] = _number(v)
    return out


def columns(rows: list[dict]) -> list[str]:
    """The table's columns: run, the lead ones, then the metrics; a column no run has is dropped."""
    keys = list(dict.fromkeys(k for r in rows for k in r if k not in ("run", "unit", "tokens")))
    ordered = [k for k in LEAD if k in keys] + [k for k in keys if k not in LEAD]
    return ["run"] + [k for k in ordered if any(r.get(k) is not None for r in rows)]


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.1f}" if abs(v) >= 100 else f"{v:.4f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def render(rows: list[dict]) -> str:
    """An aligned text table, one line per run."""
    cols = columns(rows)
    cells = [cols] + [[_cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(cols))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
                     for line in cells) + "\n"


def panel(run: Run) -> tuple:
    """Runs drawn in one panel: same kind (RL or not), same data (corpus or task), same vocabulary."""
    from .rundiff import spec_of
    data, spec = run.config.get("data") or {}, None
    if not run.rl:
        spec = spec_of(run)
    return (run.rl, data.get("task") or data.get("corpus"), data.get("vocab"), (spec or {}).get("vocab_size"))


def _title(key: tuple) -> str:
    rl, data, vocab, size = key
    if rl:
        return f"environment {data}" if data else "RL"
    ids = f"{vocab or 'its own'} vocabulary" + (f" ({size} ids)" if size else "")
    return f"{data}, {ids}" if data else ids


# -- what can be drawn ------------------------------------------------------------------------------
def check_figure(out: str | Path, flag: str = "--out") -> Path:
    """``out`` as the path of a figure matplotlib can write (a known suffix, not a directory), or a
    one-line error naming it and the fix."""
    from matplotlib.backend_bases import FigureCanvasBase
    path = Path(out).expanduser()
    if path.is_dir() or str(out).endswith(("/", os.sep)):
        raise IsADirectoryError(f"{flag} {out} is a directory; name the figure's file, e.g. "
                                f"{flag} {path / 'curves.png'}")
    kinds = FigureCanvasBase.get_supported_filetypes()
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in kinds:
        what = f"ends in .{suffix}, which is not an image format matplotlib writes" if suffix else "has no suffix"
        raise ValueError(f"{flag} {out} {what}; name an image file such as {path.with_suffix('.png')} "
                         f"(formats: {', '.join(sorted(kinds))})")
    if path.parent.exists() and not path.parent.is_dir():
        raise NotADirectoryError(f"{flag} {out}: {path.parent} is a file, not a directory; pick another path")
    return path


def check_drawable(runs: list[Run], bpc: bool, empty: bool = True) -> None:
    """Refuse in one line a run with nothing to draw: ``--bpc`` on an RL run or a run whose
    evaluations report no bits per character, and (``empty``) a run whose logs have no rows."""
    for run in runs:
        if bpc and run.rl:
            raise ValueError(f"--bpc: {run.label} is an RL run (return per episode, no bits per character); "
                             f"drop --bpc to draw its return, or pass language-model runs only")
        if bpc and not any(r.get("bpc") not in (None, "") for r in run.evals):
            raise ValueError(f"--bpc: {run.label} has no evaluation with bits per character (eval.csv "
                             f"{'has no rows' if not run.evals else 'reports none: not a text run'}); drop --bpc "
                             f"to draw its loss")
        if empty and not run.train and not run.evals and not (run.rl and return_curve(run)[0]):
            raise ValueError(f"{run.label} has nothing to draw: its train.csv and eval.csv have no rows (a run "
                             f"shorter than train.log_every that never evaluated); train it longer or with "
                             f"train.log_every=1")


def _seconds_at(xs: list[int], run: Run, key: str = "step") -> list[float]:
    """The run's clock at each ``key`` value (step, or tokens for RL), interpolated between logged
    training rows and linearly extrapolated past the last one (a final evaluation between two log
    steps); the first row of equal values wins (a rollout's first PPO update). A run too short to
    log a training row ends at its training seconds."""
    logged = [(int(r[key]), float(r["elapsed_s"])) for r in run.train]
    last = run.result.get("steps" if key == "step" else key) or 0
    pts = [(0, 0.0)] + (logged or [(int(last), float(_number(run.result.get("train_s")) or 0.0))])
    out = []
    for s in xs:
        i = next((i for i, (x, _) in enumerate(pts) if x >= s), None)
        (x0, t0), (x1, t1) = (pts[-2], pts[-1]) if i is None else (pts[max(i - 1, 0)], pts[i])
        out.append(t0 if x1 == x0 else t0 + (s - x0) * (t1 - t0) / (x1 - x0))
    return out


def lines(run: Run, bpc: bool = False) -> list[tuple[str, list, list, list]]:
    """The run's curves as (kind, x, seconds, y); kind is 'train' or 'val' (drawn thin and bold)."""
    if run.rl:
        return [("train", *return_curve(run))]
    out = []
    if not bpc:
        out.append(("train", [int(r["step"]) for r in run.train], [float(r["elapsed_s"]) for r in run.train],
                    [float(r["loss"]) for r in run.train]))
    key = "bpc" if bpc else "loss"
    evals = [r for r in run.evals if r.get(key) not in (None, "")]
    steps = [int(r["step"]) for r in evals]
    out.append(("val", steps, _seconds_at(steps, run), [float(r[key]) for r in evals]))
    return out


def plot(runs: list[Run], out: str | Path, bpc: bool = False) -> Path:
    """One row of two panels (against steps, against seconds) per quantity and data: loss (or bpc)
    for language-model and seq2seq runs, one row per corpus or task and vocabulary; batch-mean
    return for RL runs, one row per environment."""
    plt = pyplot()
    keys = [panel(r) for r in runs]
    groups = list(dict.fromkeys(keys))
    out = check_figure(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(len(groups), 2, figsize=(11, 4 * len(groups)), squeeze=False, layout="constrained")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for (ax_steps, ax_time), group in zip(axes, groups):
        rl = group[0]
        for i, run in enumerate(runs):
            if keys[i] != group:
                continue
            for kind, xs, ts, ys in lines(run, bpc):
                style = {"color": colors[i % len(colors)], "lw": 1.0 if kind == "train" else 2.0,
                         "alpha": 0.45 if kind == "train" and not rl else 1.0,
                         "marker": "o" if kind == "val" else None, "markersize": 3}
                ax_steps.plot(xs, ys, label=run.label if kind == "val" or rl else None, **style)
                ax_time.plot(ts, ys, **style)
        y = "batch-mean episodic return" if rl else (
            "validation bits per character" if bpc else "loss (nats per token; thin: train, bold: validation)")
        ax_steps.set_xlabel("environment steps" if rl else "optimiser steps")
        ax_time.set_xlabel("seconds (the run's clock: evaluations included)")
        for ax in (ax_steps, ax_time):
            ax.set_ylabel(y, fontsize=8)
            ax.grid(alpha=0.3)
        ax_steps.legend(fontsize=7)
        if len(groups) > 1:
            ax_steps.set_title(_title(group), fontsize=9, loc="left")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def add_args(p, default_out: str = DEFAULT_OUT) -> None:
    """The run list and the plot's options (shared by compare, plot curves and rl compare)."""
    add_flags(p, Compare, defaults={"out": default_out})


def run(args) -> int:
    """`tfamily plot curves`: the figure only."""
    check_figure(args.out)
    runs = [load(r) for r in args.runs]
    check_drawable(runs, args.bpc)
    print(f"plot: {plot(runs, args.out, args.bpc)}")
    return 0


def compare(args) -> int:
    """`tfamily compare` (and `tfamily rl compare`): the table, what differs, then the figure; the
    warning (when the runs differ beyond their members) on stderr."""
    import sys

    from .rundiff import differences, render_differences, warning
    check_figure(args.out)
    runs = [load(r) for r in args.runs]
    check_drawable(runs, args.bpc, empty=False)  # a run without logs still has its row in the table
    rows, diffs = [row(r) for r in runs], differences(runs)
    path = plot(runs, args.out, args.bpc)
    said = warning(diffs)
    if args.json:
        print(json.dumps({"plot": str(path), "runs": rows, "differences": diffs, "warning": said}, indent=1))
    else:
        print(render(rows) + render_differences(diffs) + f"plot: {path}")
    if said:
        print(f"tfamily compare: {said}", file=sys.stderr)
    return 0


def add_compare_args(p, default_out: str = DEFAULT_OUT) -> None:
    add_args(p, default_out)
    add_flags(p, CompareTable)
    p.set_defaults(func=compare)


def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="final metrics of runs in one table and their curves in one figure",
                       description="Compare finished runs of any kind (language model, seq2seq, RL): a table "
                                   "of each run's final metrics (result.json) and its curves overlaid against "
                                   "steps and against seconds.")
    add_compare_args(p)
