"""`tfamily arena`: run a grid of members x tasks x seeds and write its leaderboard; `tfamily arena
merge DIR...` writes the leaderboard of several shards' directories."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = ("members side by side on long-range classification tasks (ListOps, MNIST pixels, Pathfinder, text, "
        "document matching): one leaderboard")
# Presets: the settings of a named grid, each applied where the command line leaves the flag at its
# default. arena-cpu is Long Range Arena's grid at CPU lengths (the arena's five default members),
# with the step budget that fits about an hour on a 2-core machine (docs/results/arena.md).
PRESETS = {"arena-cpu": {"tasks": ["listops", "pathfinder", "mnist", "text"],
                         "length": ["listops=512", "pathfinder=16", "mnist=14", "text=1024"],
                         "seeds": 3, "steps": 30, "batch_size": 8, "threads": 2}}
DEFAULTS = {"tasks": ["listops"], "length": [], "seeds": 1, "steps": None, "batch_size": 16, "threads": 1}


def add_parser(sub) -> None:
    p = sub.add_parser("arena", help=HELP, description=HELP)
    from .grid import ARENA_MEMBERS
    p.add_argument("--members", nargs="+", default=list(ARENA_MEMBERS),
                   help="members to compare, each its bidirectional encoder; NAME:causal runs the decoder as it is")
    p.add_argument("--causal", action="store_true",
                   help="run every member given without a variant as NAME:causal (its own causal pattern)")
    p.add_argument("--tasks", nargs="+", default=None, help="listops, mnist, pathfinder, text, match (default listops)")
    p.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 per (task, member) (default 1)")
    p.add_argument("--steps", type=int, default=None, help="training steps per cell (default 200 without --time)")
    p.add_argument("--time", default=None, help="training time per cell instead: 300, 90s, 4m, 1h")
    p.add_argument("--length", nargs="+", default=[], metavar="TASK=N",
                   help="sequence length per task (mnist, pathfinder: the image side); defaults listops=256 "
                        "mnist=14 pathfinder=16 text=256 match=256")
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=None, help="examples per step (default 16)")
    p.add_argument("--lr", type=float, nargs="+", default=[1e-3],
                   help="learning rate; several: a sweep, every seed at each, the best by validation reported")
    p.add_argument("--match-params", action=argparse.BooleanOptionalAction, default=True,
                   help="set each member's d_ff so its parameters are within 10%% of the first member's")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps (default: a tenth of --steps)")
    p.add_argument("--eval-examples", type=int, default=256, help="validation and test examples per task")
    p.add_argument("--threads", type=int, default=None, help="torch threads in every cell (default 1)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--ckpt-every", type=int, default=50, help="checkpoint every N steps (what a killed cell resumes from)")
    p.add_argument("--shard", default=None, metavar="I/N", help="run cells I, I+N, I+2N, ... of the grid")
    p.add_argument("--out", default="runs/arena", help="the arena directory (one run directory per cell)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--preset", default=None, choices=list(PRESETS),
                   help="a named grid: arena-cpu = listops 512, pathfinder 16, mnist 14, text 1024, 5 members, "
                        "3 seeds, 30 steps of 8 (about an hour on 2 cores); flags given win")
    p.set_defaults(func=_run)
    inner = p.add_subparsers(dest="arena_command", metavar="COMMAND")
    m = inner.add_parser("merge", help="the leaderboard of the finished cells of several arena directories")
    m.add_argument("dirs", nargs="+", metavar="DIR")
    m.add_argument("--out", required=True, help="where the merged leaderboard goes")
    m.set_defaults(func=_merge)
    r = inner.add_parser("report", help="one self-contained HTML page: leaderboard, plots, learning curves")
    r.add_argument("dirs", nargs="+", metavar="DIR", help="an arena --out directory (several: shards, merged)")
    r.add_argument("--out", default=None, help="the page (default DIR/report.html)")
    r.set_defaults(func=_report)


def settings(args):
    """The checked ``Settings`` of the command line (one-line errors naming the flag)."""
    from ..numbers import check_int, check_number
    from ..train.config import parse_duration
    from . import tasks
    from .grid import Settings
    lengths = {}
    for item in args.length:
        name, eq, value = item.partition("=")
        if not eq or not value.strip().lstrip("-").isdigit():
            raise ValueError(f"--length {item}: give TASK=N, e.g. --length listops=512 mnist=14")
        lengths[tasks.check_name(name)] = tasks.check_length(name, int(value))
    if args.steps is not None and args.time is not None:
        raise ValueError("give --steps or --time, not both")
    steps = None if args.steps is None else check_int("--steps", args.steps, 1, hint="e.g. --steps 20")
    if args.time is not None:
        parse_duration(args.time, "--time")
    for flag in ("d_model", "layers", "heads", "batch_size", "eval_examples", "threads", "ckpt_every"):
        check_int(f"--{flag.replace('_', '-')}", getattr(args, flag), 1)
    if args.warmup is not None:
        check_int("--warmup", args.warmup, 0)
    for lr in args.lr:
        check_number("--lr", lr, 0.0, lo_open=True)
    if args.d_model % args.heads:
        raise ValueError(f"--d-model {args.d_model} must be divisible by --heads {args.heads}")
    return Settings(steps=steps if steps or args.time else 200, time=args.time, lengths=lengths,
                    d_model=args.d_model, n_layers=args.layers, n_heads=args.heads, batch_size=args.batch_size,
                    lr=args.lr[0], warmup=args.warmup, match_params=args.match_params,
                    eval_examples=args.eval_examples, threads=args.threads,
                    precision=args.precision, device=args.device, ckpt_every=args.ckpt_every)


def apply_preset(args) -> None:
    """Fill the flags the command line did not give from ``args.preset``, then from ``DEFAULTS``."""
    preset = PRESETS.get(args.preset, {})
    given = {item.partition("=")[0] for item in args.length}  # a task's --length wins over the preset's
    args.length = [v for v in preset.get("length", []) if v.partition("=")[0] not in given] + list(args.length)
    for key, value in DEFAULTS.items():
        if key == "steps" and args.time is not None:
            continue  # --time given: the preset's step budget gives way
        if key != "length" and getattr(args, key) is None:
            setattr(args, key, preset.get(key, value))


def _run(args) -> int:
    from . import grid, table
    apply_preset(args)
    s = settings(args)
    i, n = grid.parse_shard(args.shard)
    members = [m if ":" in m or not args.causal else f"{m}:{grid.CAUSAL}" for m in args.members]
    cells = grid.grid(members, args.tasks, args.seeds, args.lr)
    grid.check_cells(cells, s)
    d_ff, notes = grid.match_d_ff(cells, s, args.data_dir)
    if s.time is not None:
        from ..options import parse_duration
        grid.check_budget(cells, s, parse_duration(s.time, "--time"), args.data_dir, d_ff)
    for note in notes:
        print(f"arena: {note}", file=sys.stderr)
    mine = cells[i::n]
    print(f"arena: {len(mine)} of {len(cells)} cells{f' (shard {i}/{n})' if n > 1 else ''} -> {args.out}",
          file=sys.stderr)
    for k, cell in enumerate(mine, 1):
        row, what = grid.run_cell(cell, s, args.out, args.data_dir, d_ff[(cell.task, cell.member)])
        lr = "" if cell.lr is None else f" lr {cell.lr:g}"
        print(f"[{k}/{len(mine)}] {cell.task} {cell.member}{lr} seed {cell.seed}: {what}, test acc "
              f"{100 * row['test_acc']:.1f}%, {row['steps']} steps, {row['train_s']:.1f} s, {row['params']:,} params "
              f"(d_ff {row['d_ff']})", file=sys.stderr, flush=True)
    wanted = {(c.task, c.member, c.seed, s.lr_of(c)) for c in cells}
    done = [r for r in table.collect([args.out]) if (r["task"], r["member"], r["seed"], r.get("lr", s.lr)) in wanted]
    rows = table.write(args.out, done)
    print(table.markdown(rows), end="")
    missing = len(cells) - len(done)
    if missing:
        print(f"arena: {missing} cell(s) of the grid not finished in {args.out} yet (other shards); "
              f"`tfamily arena merge` their directories when they are", file=sys.stderr)
    print(f"arena: leaderboard in {Path(args.out) / 'leaderboard.md'}", file=sys.stderr)
    return 0


def _merge(args) -> int:
    from . import table
    found = table.collect(args.dirs)
    if not found:
        raise ValueError(f"no finished arena cells (<task>/<member>-s<seed>/cell.json) under {' '.join(args.dirs)}; "
                         f"pass the --out directories of `tfamily arena` runs")
    rows = table.write(args.out, found)
    print(table.markdown(rows), end="")
    return 0


def _report(args) -> int:
    from . import report
    page = report.write(args.dirs, args.out or Path(args.dirs[0]) / "report.html")
    print(f"arena: report in {page}", file=sys.stderr)
    return 0
