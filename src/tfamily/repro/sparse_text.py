"""Sparse decoders against a dense one on characters, with the same budget.

`tfamily repro sparse-text` trains a dense GPT and the Sparse Transformer (strided
and fixed), Longformer and BigBird members at one shape (same width, depth, heads,
sequence length, optimiser, steps and precision) with `tfamily train`, then prints
validation bits per character and training time side by side (JSON with --json) and
writes results.json / results.csv and a bar chart, results.png.

With ``--time`` every member gets the same wall-clock budget instead of the same steps, and
with ``--eval-every`` the runs are scored along the way: curves.json/csv and curves.png (validation
bpc against training seconds), and each member's ``time_to_target_s``, the training seconds it
took to reach ``--target-bpc`` (default: the dense gpt's final bpc, its mean over seeds), the
time-to-bpc comparison of a sparse member against the dense one at long context (e.g.
``--corpus kjv --seq-len 8192``).
Only the attention pattern and kernel differ; pattern sizes are scaled to the
sequence length (stride ~ sqrt(L) as in Child et al. 2019, windows of L / 4).

``--seeds N`` trains every member with seeds 0..N-1 (``train.seed``; directories ``<member>`` for
seed 0, ``<member>-s<seed>`` for the others). The (member, seed) runs are cells of the one grid
runner (``train/grid.py``): a rerun over the same ``--out`` skips finished runs, and ``--shard i/n``
runs every n-th.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..bench.results import print_rows, write_rows
from ..train import grid as runner
from .plots import save_bars, save_bpc_curves
from ..settings.schema import add_flags, setting


@dataclass
class Settings:
    """`tfamily repro sparse-text`."""
    corpus: str = setting("tinyshakespeare", flag=True)
    seq_len: int = setting(256, flag=True, lo=0)
    steps: int = setting(600, flag=True, lo=0)
    time: str | None = setting(None, flag=True, metavar="DUR",
                               help="the same wall-clock budget per member (e.g. 10m) instead of --steps")
    eval_every: int | None = setting(None, flag=True, lo=0, help="steps between validation scores (the curves)")
    eval_tokens: int | None = setting(None, flag=True, lo=0, help="validation tokens per score (default: all)")
    target_bpc: float | None = setting(None, flag=True,
                                       help="the bpc of time_to_target_s (default: the dense gpt's final bpc)")
    batch_size: int = setting(32, flag=True, lo=0)
    d_model: int = setting(256, flag=True, lo=0)
    layers: int = setting(4, flag=True, lo=0)
    heads: int = setting(4, flag=True, lo=0)
    lr: float = setting(3e-3, flag=True, check=False)  # checked as train.lr, naming --lr
    block_size: int = setting(32, flag=True, lo=0, help="blocksparse tile size")
    precision: str = setting("auto", flag=True, choices=("auto", "bf16", "fp32"),
                             help="auto = bf16 only where the CPU/GPU runs it natively")
    threads: int | None = setting(None, flag=True, lo=0, help="torch threads per run (train.threads)")
    device: str | None = setting(None, flag=True, help="auto (the default: CUDA when present), cpu, cuda or cuda:N "
                                                       "(train.device)")
    members: list[str] | None = setting(None, flag=True, nargs="*", help="subset of the runs below")
    seeds: int = setting(1, flag=True, lo=0, help="seeds 0..N-1 per member")
    shard: str | None = setting(None, flag=True, metavar="I/N", help=runner.SHARD_HELP)
    out: str | None = setting(None, flag=True, help="directory for the runs and results.json (default "
                              "runs/repro/sparse-text/<time>, so a re-run never collides with an earlier one)")
    data_dir: str | None = setting(None, flag=True, metavar="DIR",
                                   help="data directory (else $TFAMILY_DATA, else the user cache)")
    json: bool = setting(False, flag=True)


def add_args(p) -> None:
    add_flags(p, Settings)


def runs(seq_len: int, block: int) -> dict:
    """member -> pattern params for this length (None: the member's own dense pattern)."""
    stride = max(2, round(math.sqrt(seq_len)))
    window = max(2, seq_len // 4)
    small = max(4, seq_len // 16)
    return {
        "gpt": None,
        "sparse_transformer_strided": {"stride": stride, "combine": "heads"},
        "sparse_transformer_fixed": {"block": stride, "summary": max(1, stride // 4), "combine": "heads"},
        "longformer": {"window": window, "n_global": 1},
        "bigbird": {"block": small, "n_random": 2},
    }


def command(member: str, params: dict | None, args, out: Path, seed: int = 0) -> list[str]:
    cmd = [sys.executable, "-m", "tfamily.cli", "train", "--member", member, "--json", "--out", str(out),
           "--precision", args.precision,
           *(["--time", str(args.time)] if getattr(args, "time", None) else ["--steps", str(args.steps)]),
           f"data.corpus={args.corpus}", "data.vocab=char", f"data.seq_len={args.seq_len}",
           f"model.d_model={args.d_model}", f"model.depth.n_layers={args.layers}",
           f"model.heads.n_heads={args.heads}", "model.dropout=0.0", f"model.position.max_len={args.seq_len}",
           f"train.batch_size={args.batch_size}", f"train.lr={args.lr}", "train.warmup=50",
           f"train.eval_every={getattr(args, 'eval_every', None) or 'null'}",
           f"train.eval_tokens={getattr(args, 'eval_tokens', None) or 'null'}", "train.ckpt_every=null",
           "train.progress=false", f"train.seed={seed}"]
    if args.threads:
        cmd.append(f"train.threads={args.threads}")
    if getattr(args, "device", None):
        cmd.append(f"train.device={args.device}")
    if getattr(args, "data_dir", None):
        cmd += ["--data-dir", str(args.data_dir)]
    if params is not None:
        cmd += ["model.pattern.per_layer=[]", f"model.pattern.params={json.dumps(params)}",
                f'model.kernel.params={json.dumps({"block_size": args.block_size})}']
    return cmd


def cell_dir(out: Path, member: str, seed: int) -> Path:
    return out / (member if seed == 0 else f"{member}-s{seed}")


def train_cell(args, member: str, params: dict | None, seed: int, d: Path) -> dict:
    """One (member, seed) run of ``tfamily train`` in ``d``: its table row and its curve."""
    cmd = command(member, params, args, d, seed)
    print("# " + " ".join(cmd[2:]), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    last = (proc.stderr.strip().splitlines() or [""])[-1]
    if proc.returncode in (2, 3) and last.startswith("tfamily train: "):  # the run's own one-line answer
        raise ValueError(f"training {member}: {last.split(': ', 2)[-1]} (sparse-text passes --corpus, --seq-len, "
                         f"--d-model, --layers, --heads, --lr, ... as data.*, model.* and train.* settings)")
    if proc.returncode:
        raise RuntimeError(f"training {member} failed:\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    row = {"member": member, "seed": seed, "pattern": params or "causal (dense)", "val_bpc": res["val_bpc"],
           "val_loss": res["val_loss"], "train_s": res["train_s"], "tokens_per_s": res["tokens_per_s"],
           "steps": res["steps"], "params": res["params"], "precision": res["precision"]}
    print(f"# {member} seed {seed}: val bpc {res['val_bpc']:.3f}, {res['train_s']:.0f} s", file=sys.stderr, flush=True)
    return {"row": row, "curve": [{"member": member, "seed": seed, **c} for c in res.get("curve", [])]}


def run(args) -> int:
    plan = runs(args.seq_len, args.block_size)
    names = args.members or list(plan)
    unknown = sorted(set(names) - set(plan))
    if unknown:
        raise ValueError(f"unknown run(s) {unknown}; choose from {', '.join(plan)}")
    for flag in ("seq_len", "steps", "batch_size", "d_model", "layers", "heads", "block_size", "seeds"):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    out = Path(args.out or f"runs/repro/sparse-text/{time.strftime('%Y%m%d-%H%M%S')}")
    shared = runner.args_plan(args, drop=("members", "seeds"))
    cells = [(cell_dir(out, m, seed), {**shared, "member": m, "seed": seed, "pattern": plan[m]})
             for m in dict.fromkeys(names) for seed in range(args.seeds)]

    def work(d: Path) -> dict:
        saved = runner.read_plan(d)
        return train_cell(args, saved["member"], plan[saved["member"]], saved["seed"], d)
    log = (lambda m: print(m, file=sys.stderr, flush=True))
    done = [r for r in runner.run_cells(cells, work, shard=args.shard, log=log) if r is not None]
    if not done:
        return 0
    rows = [r["row"] for r in done]
    curves = [c for r in done for c in r["curve"]]
    target = time_to_target(rows, curves, args.target_bpc)
    write_rows(out, "results", rows, list(rows[0]))
    budget = f"{args.time} each" if args.time else f"{args.steps} steps each"
    bars = [{**r, "member": f"{r['member']} s{r['seed']}"} for r in rows] if args.seeds > 1 else rows
    save_bars(bars, "val_bpc", "validation bits per character", out / "results.png",
              f"{args.corpus}, L={args.seq_len}, {budget} (training seconds on the bars)", note="train_s")
    if curves:
        write_rows(out, "curves", curves, list(curves[0]))
        save_target_curves(curves, rows, target, out / "curves.png", f"{args.corpus}, L={args.seq_len}, {budget}")
    print_rows(rows, [("member", "member", "<30"), ("seed", "seed", ">5"), ("val_bpc", "val bpc", ">9.3f"),
                      ("train_s", "train s", ">9.0f"), ("tokens_per_s", "tok/s", ">9.0f")], args.json)
    return 0


def mine(point: dict, row: dict) -> bool:
    """Whether curve ``point`` belongs to result ``row`` (same member and seed)."""
    return point["member"] == row["member"] and point.get("seed") == row.get("seed")


def time_to_target(rows: list[dict], curves: list[dict], target: float | None) -> float | None:
    """Set each row's ``time_to_target_s``: the training seconds of its first validation score at
    or below ``target`` (None if it never got there). Default target: the dense gpt's final bpc."""
    if target is None:
        dense = [r["val_bpc"] for r in rows if r["member"] == "gpt"]
        target = sum(dense) / len(dense) if dense else None
    for r in rows:
        hit = [c["train_s"] for c in curves if mine(c, r) and c["val_bpc"] is not None
               and target is not None and c["val_bpc"] <= target]
        r["target_bpc"], r["time_to_target_s"] = target, (round(min(hit), 1) if hit else None)
    return target


def save_target_curves(curves: list[dict], rows: list[dict], target: float | None, path: Path, title: str) -> None:
    lines = []
    for r in rows:
        when = "" if r.get("time_to_target_s") is None else f", target at {r['time_to_target_s']:.0f} s"
        seed = "" if r.get("seed") in (None, 0) else f" s{r['seed']}"
        lines.append((f"{r['member']}{seed} ({r['steps']} steps{when})", [c for c in curves if mine(c, r)]))
    save_bpc_curves(lines, path, title, target)


if __name__ == "__main__":  # the same as `tfamily repro sparse-text`
    from ..cli import main
    sys.exit(main(["repro", "sparse-text", *sys.argv[1:]]))
