"""`tfamily rl table`: a sweep directory as POPGym's MMER table, and its learning curves.

Morad et al. 2023 score a trial by its maximum mean episodic return (MMER): the maximum,
over training, of the batch-mean episodic return (the mean return of the episodes that ended
in one batch: here one rollout, as ``task.py`` reports it); a model's entry is the mean and
standard deviation of MMER over trials (seeds). POPGym's tasks already scale their returns
into [-1, 1], so returns are used as they are. Beside MMER the table gives the final
batch-mean return and the evaluation return after training (``result.json``'s ``val_return``).
Only finished runs enter the table; unfinished ones are listed as pending.

Published baselines are not bundled: ``--baselines FILE`` adds rows from a JSON file
``{"source": "...", "rows": [{"env": ID, "model": NAME, "mmer_mean": x, "mmer_std": y,
"ref": "Table N"}]}``, each printed with its reference.
"""
from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

from ..base.textload import number, read_json, require
from ..base.plotting import pyplot
from ..train.metrics import rollout_returns as curve  # the run's (env steps, batch-mean return)


def mmer(returns) -> float:
    """Maximum over training of the batch-mean episodic return (Morad et al. 2023)."""
    values = [float(r) for r in returns if r is not None and not math.isnan(float(r))]
    if not values:
        raise ValueError("no batch-mean return in this curve (no episode ended during training)")
    return max(values)


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1; NaN for a single trial)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else math.nan


def runs(sweep_dir: str | Path) -> list[dict]:
    """Every run under ``sweep_dir`` (a ``plan.json`` beside it), finished or not."""
    root = Path(sweep_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"sweep directory {root} does not exist; pass the --out of `tfamily rl sweep`")
    out = []
    for plan_path in sorted(root.glob("*/*/plan.json")):
        run = plan_path.parent
        plan = _plan(plan_path)
        result_path = run / "result.json"
        result = _result(result_path) if result_path.is_file() else None
        xs, ys = curve(run) if (run / "train.csv").is_file() else ([], [])
        # a run continued to a larger --steps keeps its old result.json until it finishes again
        finished = result is not None and result["tokens"] >= plan["steps"] and (not xs or result["tokens"] >= xs[-1])
        out.append({"run": str(run), "env": plan["env"], "label": plan["label"], "seed": plan["seed"],
                    "finished": finished, "env_steps": xs, "mean_return": ys, "result": result})
    if not out:
        raise FileNotFoundError(f"no runs under {root} (no <env>/<label>-s<seed>/plan.json); "
                                f"pass the --out of `tfamily rl sweep`")
    return out


def _plan(path: Path) -> dict:
    """A run's ``plan.json`` with the fields the table reads, each checked (one line naming the file)."""
    plan = read_json(path)
    for key, kind in (("env", str), ("label", str), ("seed", int), ("steps", int)):
        require(plan, key, kind, str(path), fix="the file is corrupt or hand-edited: rerun the sweep to rewrite it")
    return plan


def _result(path: Path) -> dict:
    """A run's ``result.json`` with the fields the table reads, each checked."""
    result = read_json(path)
    where, fix = str(path), "the file is corrupt or hand-edited: rerun the sweep to rewrite it"
    require(result, "tokens", int, where, fix=fix)
    number(result, "tokens_per_s", where, fix=fix)
    if result.get("val_return") is not None:
        number(result, "val_return", where, fix=fix)
    return result


def reached(xs: list[int], ys: list[float], level: float) -> int | None:
    """The first env step whose batch-mean return is >= ``level`` (None: never)."""
    return next((x for x, y in zip(xs, ys) if y >= level), None)


def table(rows: list[dict], reach: float | None = None) -> list[dict]:
    """One entry per (env, label) over its finished trials: MMER, final and eval return; with
    ``reach``, the env steps until the batch-mean return first reached it (a speed MMER hides
    once every torso saturates), over the trials that reached it."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if r["finished"] and r["mean_return"]:
            groups.setdefault((r["env"], r["label"]), []).append(r)
    out = []
    for (env, label), trials in sorted(groups.items(), key=lambda kv: (kv[0][0], _order(kv[0][1]))):
        trials = sorted(trials, key=lambda t: t["seed"])
        m, s = mean_std([mmer(t["mean_return"]) for t in trials])
        f, fs = mean_std([t["mean_return"][-1] for t in trials])
        evals = [t["result"]["val_return"] for t in trials if t["result"].get("val_return") is not None]
        e, es = mean_std(evals) if evals else (math.nan, math.nan)
        out.append({"env": env, "label": label, "trials": len(trials), "seeds": [t["seed"] for t in trials],
                    "env_steps": min(t["result"]["tokens"] for t in trials), "mmer_mean": m, "mmer_std": s,
                    "final_mean": f, "final_std": fs, "eval_mean": e, "eval_std": es,
                    "env_steps_per_s": statistics.fmean(t["result"]["tokens_per_s"] for t in trials)})
        if reach is not None:
            hit = [x for t in trials if (x := reached(t["env_steps"], t["mean_return"], reach)) is not None]
            out[-1].update(reach=reach, reached=len(hit), reach_steps_mean=statistics.fmean(hit) if hit else math.nan)
    return out


def _order(label: str) -> tuple:
    """The sweep's default torso order (rl/sweep.py), then other labels alphabetically."""
    from .sweep import TORSOS, parse_torso
    labels = [parse_torso(t).label for t in TORSOS]
    return (labels.index(label), "") if label in labels else (len(labels), label)


def load_baselines(path: str | Path | None) -> dict:
    if path is None:
        return {"source": None, "rows": []}
    if not Path(path).is_file():
        raise FileNotFoundError(f"--baselines {path} is not a file; pass a JSON file of published rows "
                                f"(see rl/table.py) or leave the flag out")
    data = read_json(path, (dict, list))
    rows = data.get("rows") if isinstance(data, dict) else None
    need = {"env", "model", "mmer_mean", "ref"}
    if not isinstance(rows, list) or any(not isinstance(r, dict) or need - set(r) for r in rows):
        raise ValueError(f"{path}: baselines must be {{\"source\": ..., \"rows\": [{{\"env\", \"model\", "
                         f"\"mmer_mean\", \"mmer_std\", \"ref\"}}, ...]}}; each row needs {sorted(need)}")
    return {"source": data.get("source"), "rows": rows}


def _reach(e: dict) -> str:
    if "reach" not in e:
        return ""
    if not e["reached"]:
        return " not reached |"
    return f" {e['reach_steps_mean']:,.0f} ({e['reached']}/{e['trials']} trials) |"


def _pm(mean: float, std: float) -> str:
    if math.isnan(mean):
        return "n/a"
    return f"{mean:.3f}" if math.isnan(std) else f"{mean:.3f} ± {std:.3f}"


def markdown(entries: list[dict], baselines: dict, pending: list[dict]) -> str:
    reach = next((e["reach"] for e in entries if "reach" in e), None)
    extra = "" if reach is None else f" steps to return >= {reach:g} |"
    head = "| env | torso | trials | env steps | MMER | final batch-mean return | eval return | env steps/s |"
    lines = [head + extra,
             "|---|---|---|---|---|---|---|---|" + ("" if reach is None else "---|")]
    envs = list(dict.fromkeys([e["env"] for e in entries] + [b["env"] for b in baselines["rows"]]))
    for env in envs:
        for e in (e for e in entries if e["env"] == env):
            lines.append(f"| {env} | {e['label']} | {e['trials']} | {e['env_steps']:,} | "
                         f"{_pm(e['mmer_mean'], e['mmer_std'])} | {_pm(e['final_mean'], e['final_std'])} | "
                         f"{_pm(e['eval_mean'], e['eval_std'])} | {e['env_steps_per_s']:,.0f} |" + _reach(e))
        for b in (b for b in baselines["rows"] if b["env"] == env):
            std = b.get("mmer_std")
            lines.append(f"| {env} | POPGym {b['model']} ({b['ref']}) | | | "
                         f"{_pm(float(b['mmer_mean']), math.nan if std is None else float(std))} | | | |")
    lines.append("")
    lines.append("MMER: per trial the maximum over training of the batch-mean episodic return (one batch = one "
                 "rollout); mean ± sample std over trials (Morad et al. 2023).")
    if baselines["rows"]:
        lines.append(f"POPGym rows: {baselines['source']}.")
    else:
        lines.append("POPGym's published baselines: not included (no source for the numbers was available "
                     "offline); add them with --baselines FILE.")
    if pending:
        lines.append(f"Pending (unfinished, not in the table): {', '.join(sorted(p['run'] for p in pending))}.")
    return "\n".join(lines) + "\n"


def plot_env(env: str, rows: list[dict], out: str | Path) -> Path:
    """One line per torso: the mean batch-mean return over its trials on the shortest trial's
    env-step grid (others interpolated onto it), with a band of ± one std where trials > 1."""
    plt = pyplot()
    import numpy as np
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    labels = sorted(dict.fromkeys(r["label"] for r in rows), key=_order)
    for label in labels:
        trials = [r for r in rows if r["label"] == label and r["env_steps"]]
        if not trials:
            continue
        grid = np.asarray(min((t["env_steps"] for t in trials), key=lambda xs: xs[-1]), dtype=float)
        ys = np.stack([np.interp(grid, t["env_steps"], t["mean_return"]) for t in trials])
        mean = ys.mean(0)
        (line,) = ax.plot(grid, mean, label=f"{label} (n={len(trials)})")
        if len(trials) > 1:
            std = ys.std(0, ddof=1)
            ax.fill_between(grid, mean - std, mean + std, color=line.get_color(), alpha=0.2)
    ax.set_title(env)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("batch-mean episodic return")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def write(sweep_dir: str | Path, out: str | Path | None = None, baselines: str | Path | None = None,
          reach: float | None = None) -> dict:
    """table.md, table.csv, table.json and curves/<env>.png for the sweep in ``sweep_dir``."""
    if reach is not None and not math.isfinite(reach):
        raise ValueError(f"--reach must be a finite return, got {reach}; e.g. --reach 0.9")
    rows = runs(sweep_dir)
    base = load_baselines(baselines)
    out = Path(out) if out is not None else Path(sweep_dir)
    out.mkdir(parents=True, exist_ok=True)
    entries = table(rows, reach)
    pending = [r for r in rows if not r["finished"]]
    md = markdown(entries, base, pending)
    (out / "table.md").write_text(md, encoding="utf-8")
    keys = list(entries[0]) if entries else ["env", "label"]
    with open(out / "table.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows({**_finite(e), "seeds": " ".join(map(str, e["seeds"]))} for e in entries)
    plots = {}
    done = [r for r in rows if r["finished"]]
    for env in dict.fromkeys(r["env"] for r in done):
        plots[env] = str(plot_env(env, [r for r in done if r["env"] == env],
                                  out / "curves" / f"{env.replace('/', '_')}.png"))
    report = {"entries": entries, "baselines": base, "pending": [r["run"] for r in pending], "plots": plots,
              "markdown": str(out / "table.md"), "csv": str(out / "table.csv")}
    (out / "table.json").write_text(json.dumps(_finite(report), indent=1), encoding="utf-8")
    return {**_finite(report), "text": md}


def _finite(obj):
    """NaN (a single trial's std, no evaluation) as null: JSON has no NaN."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj
