"""Al-Rfou et al. 2019's auxiliary losses on a deep character Transformer (their table 4 ablation).

`tfamily repro al-rfou-aux` trains one deep, narrow character decoder (``--layers`` 12,
``--d-model`` 64, post-norm as the paper's Transformer) on Tiny Shakespeare (``--corpus``)
with the ``al_rfou`` objective: all three losses on, then each one off (``all_positions``,
``intermediate``, ``multiple_targets``), and optionally none of them (``--runs ... none``: the
plain causal LM). Every run gets the same budget: ``--time`` seconds of the loop (evaluations
for the curve included) or, with ``--steps``, the same number of steps; the same seed, data
order, optimiser and schedule. The intermediate layers' losses stop at l / (2n) of the budget
(the loop's progress: steps over the planned total, which for a time budget is its running
estimate of the last step).

bpc protocol: the mean next-character loss of the last layer / ln 2 over every position of
consecutive non-overlapping ``--seq-len`` windows of the validation split (its first
``--eval-chars`` characters; 0 = all), so contexts range from 0 to seq_len - 1 characters. The
paper scored only the last position of each 512-character window (full context), which gives
lower numbers; the curves use the first ``--curve-chars`` characters of the same split.
Paper (T64, text8 dev bpc): all 1.062; without all positions 2.482; without intermediate
layers 1.158; without multiple targets 1.068.

Writes results.json / results.csv (one row per run), curves.json / curves.csv (validation
bpc against training seconds and steps) and curves.png under ``--out``. The runs are cells of the
one grid runner (``train/grid.py``): a rerun over the same ``--out`` skips a finished run,
``--shard i/n`` trains every n-th.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..bench.results import print_rows, write_rows
from ..base.options import seconds
from ..train import grid as runner
from . import LoopRunFlags, budget
from .plots import save_bpc_curves
from ..settings.schema import add_flags, setting

RUNS = {  # run -> objective (name, params); the paper's ablation is one switch off at a time
    "all": ("al_rfou", {}),
    "no_all_positions": ("al_rfou", {"all_positions": False}),
    "no_intermediate": ("al_rfou", {"intermediate": False}),
    "no_multiple_targets": ("al_rfou", {"multiple_targets": False}),
    "none": ("causal_lm", {}),
}
PAPER = {"all": 1.062, "no_all_positions": 2.482, "no_intermediate": 1.158, "no_multiple_targets": 1.068}


@dataclass
class _OwnFlags:
    """The flags of this repro alone; ``Settings`` adds the shared run flags after them."""
    runs: list[str] = setting([r for r in RUNS if r != "none"], flag=True, choices=list(RUNS))
    corpus: str = setting("tinyshakespeare", flag=True)
    time: float = setting(300.0, flag=True, metavar="DUR", parse=seconds,
                          help="time of training per run (the equal budget)")
    steps: int | None = setting(None, flag=True, lo=0, help="budget in steps instead of --time")
    layers: int = setting(12, flag=True, lo=0)
    d_model: int = setting(64, flag=True, lo=0)
    heads: int = setting(4, flag=True, lo=0)
    residual: str = setting("post_norm", flag=True, choices=("post_norm", "pre_norm"))
    seq_len: int = setting(128, flag=True, lo=0)
    batch_size: int = setting(16, flag=True, lo=0)
    lr: float = setting(1e-3, flag=True)
    warmup: int = setting(100, flag=True, lo=0)
    dropout: float = setting(0.0, flag=True)
    curve_every: int = setting(100, flag=True, lo=0, help="steps between curve evaluations")
    curve_chars: int = setting(16384, flag=True, lo=0, help="validation characters per curve point")
    eval_chars: int = setting(0, flag=True, lo=0, help="characters of the final evaluation (0: the whole split)")


@dataclass
class Settings(LoopRunFlags, _OwnFlags):
    """`tfamily repro al-rfou-aux`."""
    out: str | None = setting(None, flag=True, help="directory (default runs/repro/al-rfou-aux/<time>)")


def add_args(p) -> None:
    add_flags(p, Settings)


def overrides(run: str, args, out: Path) -> dict:
    """The ``tfamily train`` settings of one run: everything but the objective is shared."""
    name, params = RUNS[run]
    return {"member": "gpt", "name": run, "data.corpus": args.corpus, "data.vocab": "char",
            "data.seq_len": args.seq_len, "model.d_model": args.d_model, "model.heads.n_heads": args.heads,
            "model.depth.n_layers": args.layers, "model.residual.name": args.residual,
            "model.dropout": args.dropout, "model.position.max_len": args.seq_len,
            "model.objective": {"name": name, "params": params}, **budget(args),
            "train.batch_size": args.batch_size, "train.lr": args.lr, "train.warmup": args.warmup,
            "train.eval_every": args.curve_every, "train.eval_tokens": args.curve_chars,
            "train.ckpt_every": None, "train.precision": args.precision, "train.device": args.device,
            "train.threads": args.threads, "train.seed": args.seed, "train.progress": False,
            "train.tensorboard": False, "train.out": str(out / run)}


def train_one(run: str, args, out: Path) -> tuple[dict, list[dict]]:
    """Train one run; its result row and its curve points."""
    from ..train import loop
    from ..train.config import load
    from ..train.evaluate import evaluate
    trainer = loop.Trainer(load(None, overrides(run, args, out)), data_dir=args.data_dir)
    try:
        res = trainer.fit()
        chars = args.eval_chars or None
        final = evaluate(trainer.model, trainer.task.eval_batches(chars, args.batch_size), device=trainer.device,
                         precision=trainer.precision, metrics=trainer.task.eval_metrics)
    finally:
        trainer.close()
    curve = [{"run": run, "step": e["step"], "train_s": e["train_s"], "val_bpc": e["bpc"]} for e in trainer.evals]
    row = {"run": run, "val_bpc": final["bpc"], "val_chars": final["tokens"], "paper_bpc": PAPER.get(run),
           "steps": res["steps"], "train_s": res["train_s"], "wall_s": res["wall_s"],
           "train_loss": res["train_loss"], "params": res["params"], "precision": res["precision"],
           "device": res["device"]}
    return row, curve


def save_curves(curve: list[dict], rows: list[dict], path: Path, title: str) -> None:
    lines = [(f"{r['run']}: {r['val_bpc']:.3f} ({r['steps']} steps)", [c for c in curve if c["run"] == r["run"]])
             for r in rows]
    save_bpc_curves(lines, path, title)


def run(args) -> int:
    if args.steps is None and not args.time > 0:
        raise ValueError(f"--time must be > 0 seconds (got {args.time}), or give --steps N")
    if args.layers < 2:
        raise ValueError(f"--layers must be >= 2 for intermediate layers to exist, got {args.layers}")
    out = Path(args.out or f"runs/repro/al-rfou-aux/{time.strftime('%Y%m%d-%H%M%S')}")
    shared = runner.args_plan(args, drop=("runs",))

    def work(d: Path) -> dict:
        print(f"# {d.name}: {RUNS[d.name]}", file=sys.stderr, flush=True)
        row, points = train_one(d.name, args, out)
        print(f"# {d.name}: val bpc {row['val_bpc']:.3f} after {row['steps']} steps, {row['train_s']:.0f} s",
              file=sys.stderr, flush=True)
        return {"row": row, "curve": points}
    cells = [(out / name, {**shared, "run": name}) for name in dict.fromkeys(args.runs)]
    done = [r for r in runner.run_cells(cells, work, shard=args.shard, log=lambda m: print(m, file=sys.stderr))
            if r is not None]
    if not done:
        return 0
    rows, curve = [r["row"] for r in done], [c for r in done for c in r["curve"]]
    write_rows(out, "results", rows, list(rows[0]))
    write_rows(out, "curves", curve, ["run", "step", "train_s", "val_bpc"])
    limit = f"{args.steps} steps" if args.steps else f"{args.time:.0f} s"
    save_curves(curve, rows, out / "curves.png",
                f"{args.corpus}: {args.layers} layers, d {args.d_model}, {args.residual}, L={args.seq_len}, "
                f"{limit} each\nvalidation bpc on {args.curve_chars} chars (final: every position of the split)")
    print_rows(rows, [("run", "run", "<22"), ("val_bpc", "val bpc", ">9.3f"), ("steps", "steps", ">7"),
                      ("train_s", "train s", ">8.0f")], args.json)
    return 0


if __name__ == "__main__":  # the same as `tfamily repro al-rfou-aux`
    from ..cli import main
    sys.exit(main(["repro", "al-rfou-aux", *sys.argv[1:]]))
