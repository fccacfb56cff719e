"""`tfamily arena`: run a grid of members x tasks x seeds and write its leaderboard; `tfamily arena
merge DIR...` writes the leaderboard of several shards' directories."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = ("members side by side on long-range tasks (ListOps, MNIST pixels, Pathfinder, text, document matching, "
        "byte-level language modelling): one leaderboard")
# Presets: the settings of a named grid, each applied where the command line leaves the flag at its
# default. arena-cpu is Long Range Arena's grid at CPU lengths (the arena's five default members) on the
# tasks where the dense baseline leaves chance within the budget (Pathfinder 16 and matching did not in
# 500 steps), with a two-rate sweep: 53 minutes wall measured as two one-thread shards on
# a 2-core machine (docs/results/arena.md).
PRESETS = {"arena-cpu": {"tasks": ["listops", "mnist", "text"],
                         "length": ["listops=128", "mnist=14", "text=1024"],
                         "steps": ["600", "text=80"], "lr": [1e-3, 2e-3],
                         "seeds": 3, "batch_size": 16, "threads": 1}}
DEFAULTS = {"tasks": ["listops"], "length": [], "seeds": 1, "batch_size": 16, "threads": 1, "lr": [1e-3],
            "speed_rounds": 5}


def add_parser(sub) -> None:
    p = sub.add_parser("arena", help=HELP, description=HELP)
    from . import ARENA_MEMBERS
    p.add_argument("--members", nargs="+", default=list(ARENA_MEMBERS),
                   help="members to compare, each its bidirectional encoder; NAME:causal runs the decoder as it is")
    p.add_argument("--causal", action="store_true",
                   help="run every member given without a variant as NAME:causal (its own causal pattern)")
    p.add_argument("--as-papers", action="store_true",
                   help="train each member's full preset (its paper's recipe); by default every member is gpt's "
                        "recipe with only its attention (pattern, kernel, shared-QK heads, reversible depth), so "
                        "the table compares attention alone, as Long Range Arena does")
    from . import tasks  # the declarations (no torch): their names and default lengths
    p.add_argument("--tasks", nargs="+", default=None, help=f"{', '.join(tasks.names())} (default listops)")
    p.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 per (task, member) (default 1)")
    p.add_argument("--steps", nargs="+", default=None, metavar="N|TASK=N",
                   help="training steps per cell (default 200 without --time); TASK=N for one task, e.g. "
                        "--steps 600 text=150")
    p.add_argument("--time", default=None,
                   help="training time per member and seed instead: 300, 90s, 4m, 1h (a sweep of K --lr values gives "
                        "each rate 1/K of it)")
    p.add_argument("--flops", type=float, default=None,
                   help="training FLOPs per member and seed (e.g. 2e12; counted by the arena's rule: pairs a pattern "
                        "visits, LSH chunks and hashing, every recurrent step); a sweep of K --lr values gives each "
                        "rate's cell 1/K of it, so the sweep spends at most this; each cell stops when its share is "
                        "spent (with --steps: whichever comes first)")
    p.add_argument("--length", nargs="+", default=[], metavar="TASK=N",
                   help=f"sequence length per task (mnist, pathfinder: the image side); defaults "
                        f"{' '.join(f'{n}={tasks.get(n).length}' for n in tasks.names())}")
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=None, help="examples per step (default 16)")
    p.add_argument("--lr", type=float, nargs="+", default=None,
                   help="learning rate (default 1e-3); several: a sweep, every seed at each, the best by validation "
                        "reported; --steps are per rate, a --flops or --time budget is split evenly among the rates, "
                        "and the leaderboard's TFLOP and seconds count every rate")
    p.add_argument("--match-params", action=argparse.BooleanOptionalAction, default=True,
                   help="set each member's d_ff so its parameters are within 10% of the first member's")
    p.add_argument("--allow-param-mismatch", action="store_true",
                   help="train a member whose parameters d_ff cannot bring within 10% of the first member's "
                        "(refused otherwise), marked † in every table")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps (default: a tenth of --steps)")
    p.add_argument("--eval-examples", type=int, default=256, help="validation and test examples per task")
    p.add_argument("--threads", type=int, default=None, help="torch threads in every cell (default 1)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--ckpt-every", type=int, default=50, help="checkpoint every N steps (what a killed cell resumes from)")
    p.add_argument("--shard", default=None, metavar="I/N", help="run cells I, I+N, I+2N, ... of the grid")
    p.add_argument("--speed-rounds", type=int, default=None,
                   help="after a complete unsharded grid, time every member alternating in this process for the "
                        "speed and memory columns (`arena speed`) over N rounds (default 5; 0: skip)")
    p.add_argument("--out", default="runs/arena", help="the arena directory (one run directory per cell)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--preset", default=None, choices=list(PRESETS),
                   help="a named grid: arena-cpu = listops 128, mnist 14 (600 steps), text 1024 (80 steps), batch "
                        "16, lr 1e-3 and 2e-3, 5 members, 3 seeds, 1 thread (53 min measured as two shards on "
                        "2 cores); flags given win")
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
    v = inner.add_parser("speed", help="the speed and memory columns: every member's training step timed "
                                       "alternating in one process, at its cells' shape")
    v.add_argument("dirs", nargs="+", metavar="DIR", help="an arena --out directory (several: shards, merged)")
    v.add_argument("--rounds", type=int, default=5, help="rounds of alternating steps per task (median reported)")
    v.add_argument("--out", default=None, help="where speed.json and the leaderboard go (default the first DIR)")
    v.add_argument("--data-dir", default=None)
    v.set_defaults(func=_speed)


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
    if args.flops is not None:
        check_number("--flops", args.flops, 0.0, lo_open=True, hint="training FLOPs per cell, e.g. --flops 2e12")
        if args.time is not None:
            raise ValueError("give --time or --flops, not both (--flops with --steps: whichever is spent first)")
    steps, task_steps = None, {}
    for item in args.steps or []:
        name, eq, value = str(item).rpartition("=")
        if not value.strip().lstrip("-").isdigit():
            raise ValueError(f"--steps {item}: give N or TASK=N, e.g. --steps 600 text=150")
        if eq:
            task_steps[tasks.check_name(name)] = check_int(f"--steps {name}", int(value), 1, hint="e.g. --steps text=150")
        else:
            steps = check_int("--steps", int(value), 1, hint="e.g. --steps 20")
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
    return Settings(steps=steps if steps or args.time or args.flops else 200, time=args.time, lengths=lengths,
                    task_steps=task_steps, flops=args.flops,
                    d_model=args.d_model, n_layers=args.layers, n_heads=args.heads, batch_size=args.batch_size,
                    lr=args.lr[0], sweep=len(set(args.lr)), warmup=args.warmup, match_params=args.match_params,
                    eval_examples=args.eval_examples, threads=args.threads,
                    precision=args.precision, device=args.device, ckpt_every=args.ckpt_every,
                    base="papers" if getattr(args, "as_papers", False) else "attention")


def check_base(label: str, base: str) -> None:
    """Under the controlled protocol (``Settings.base == "attention"``) a member joins gpt's recipe with
    its attention: one whose base is not the decoder's has no attention of its own to bring."""
    from ..members import REGISTRY
    from . import grid
    name, _ = grid.split_member(label)
    kind, own = REGISTRY[name].base, any(c.attention for c in REGISTRY[name].changes)
    if base == "attention" and kind == "decoder" and name != "gpt" and not own:
        raise ValueError(f"member {name} changes nothing in attention, so on gpt's recipe it would be gpt itself; "
                         f"drop it, or pass --as-papers to train each member's full preset")
    if base == "attention" and kind != "decoder":
        what = f"{name}'s base is the {kind} recipe" if kind else f"{name} is recurrent"
        raise ValueError(f"member {name}: {what}, so it has no attention change to put on gpt's recipe (its "
                         f"attention is the dense baseline's); drop it, or pass --as-papers to train each "
                         f"member's full preset")


def apply_preset(args) -> None:
    """Fill the flags the command line did not give from ``args.preset``, then from ``DEFAULTS``."""
    preset = PRESETS.get(args.preset, {})
    for key in ("length", "steps"):  # a task's TASK=N (or the plain N of --steps) wins over the preset's
        mine = list(getattr(args, key) or [])
        if key == "steps" and (args.time is not None or args.flops is not None):
            continue  # --time or --flops given: the preset's step budget gives way
        given = {str(item).rpartition("=")[0] for item in mine}
        merged = [v for v in preset.get(key, []) if v.rpartition("=")[0] not in given] + mine
        setattr(args, key, merged or None if key == "steps" else merged)
    for key, value in DEFAULTS.items():
        if key not in ("length", "steps") and getattr(args, key) is None:
            setattr(args, key, preset.get(key, value))


def _run(args) -> int:
    from ..numbers import check_int
    from . import grid, table
    apply_preset(args)
    s = settings(args)
    i, n = grid.parse_shard(args.shard)
    members = [m if ":" in m or not args.causal else f"{m}:{grid.CAUSAL}" for m in args.members]
    cells = grid.grid(members, args.tasks, args.seeds, args.lr)
    grid.check_cells(cells, s)
    for m in dict.fromkeys(args.members):
        check_base(m, s.base)
    d_ff, off = grid.match_d_ff(cells, s, args.data_dir)
    grid.check_params(off, args.allow_param_mismatch)
    if s.time is not None:
        from ..options import parse_duration
        grid.check_budget(cells, s, parse_duration(s.cell_time, "--time"), args.data_dir, d_ff)
    for _, note in off.values():
        print(f"arena: {note}: trained as --allow-param-mismatch asks, marked † in every table", file=sys.stderr)
    check_int("--speed-rounds", args.speed_rounds, 0, hint="e.g. --speed-rounds 5, or 0 to skip")
    per_step = grid.flops_steps(cells, s, args.data_dir, d_ff)
    mine = cells[i::n]
    print(f"arena: {len(mine)} of {len(cells)} cells{f' (shard {i}/{n})' if n > 1 else ''} -> {args.out}",
          file=sys.stderr)
    if s.sweep > 1 and (s.flops is not None or s.time is not None):
        budget = f"--flops {s.flops:.3g}" if s.flops is not None else f"--time {s.time}"
        print(f"arena: {budget} per member and seed, split over {s.sweep} learning rates (1/{s.sweep} each)",
              file=sys.stderr)
    todo = [c for c in mine if not (c.dir(args.out) / "cell.json").is_file()]
    if todo:
        seconds = grid.estimate(todo, s, d_ff, per_step, args.data_dir)
        print(f"arena: {len(todo)} cell(s) to train, about {_duration(seconds)} in all (one training step of each "
              f"member timed here; evaluation included)", file=sys.stderr, flush=True)
    trained = False
    for k, cell in enumerate(mine, 1):
        key = (cell.task, cell.member)
        gap = off.get(key, (None,))[0]
        row, what = grid.run_cell(cell, s, args.out, args.data_dir, d_ff[key], per_step[key], gap)
        lr = "" if cell.lr is None else f" lr {grid.lr_text(cell.lr)}"
        if row is None:
            print(f"[{k}/{len(mine)}] {cell.task} {cell.member}{lr} seed {cell.seed}: skipped, in use by {what} "
                  f"(another arena run over {args.out})", file=sys.stderr, flush=True)
            continue
        trained = trained or what != "skipped"
        print(f"[{k}/{len(mine)}] {cell.task} {cell.member}{lr} seed {cell.seed}: {what}, test "
              f"{table.score(row)}{'%' if row.get('metric', 'acc') == 'acc' else ''}, {row['steps']} steps, "
              f"{row['train_s']:.1f} s, {row['params']:,}{table.MARK if row.get('params_off') is not None else ''} "
              f"params (d_ff {row['d_ff']})", file=sys.stderr, flush=True)
    wanted = {(c.task, c.member, c.seed, s.lr_of(c)) for c in cells}
    done = table.collect([args.out], keep=lambda r: (r["task"], r["member"], r["seed"], r.get("lr", s.lr)) in wanted)
    timed = (Path(args.out) / "speed.json").is_file()
    if n == 1 and len(done) == len(cells) and args.speed_rounds and (trained or not timed):
        from . import speed
        print(f"arena: timing every member alternating ({args.speed_rounds} rounds per task) for the speed and "
              f"memory columns", file=sys.stderr, flush=True)
        speed.write([args.out], args.out, args.speed_rounds, args.data_dir)
    rows = table.write(args.out, done, table.load_speed([args.out]))
    print(table.markdown(rows), end="")
    missing = len(cells) - len(done)
    if missing:
        print(f"arena: {missing} cell(s) of the grid not finished in {args.out} yet (other shards); "
              f"`tfamily arena merge` their directories when they are", file=sys.stderr)
    print(f"arena: leaderboard in {Path(args.out) / 'leaderboard.md'}", file=sys.stderr)
    return 0


def _duration(seconds: float) -> str:
    return f"{seconds:.2g} s" if seconds < 120 else f"{seconds / 60:.0f} min" if seconds < 7200 else \
        f"{seconds / 3600:.1f} h"


def _merge(args) -> int:
    from . import table
    found = table.collect(args.dirs)
    if not found:
        raise ValueError(f"no finished arena cells (<task>/<member>-s<seed>/cell.json) under {' '.join(args.dirs)}; "
                         f"pass the --out directories of `tfamily arena` runs")
    rows = table.write(args.out, found, table.load_speed(args.dirs))
    print(table.markdown(rows), end="")
    return 0


def _report(args) -> int:
    from . import report
    page = report.write(args.dirs, args.out or Path(args.dirs[0]) / "report.html")
    print(f"arena: report in {page}", file=sys.stderr)
    return 0


def _speed(args) -> int:
    from . import speed, table
    out = args.out or args.dirs[0]
    speed.write(args.dirs, out, args.rounds, args.data_dir)
    print(table.markdown(table.summarize(table.collect(args.dirs), table.load_speed([out]))), end="")
    print(f"arena: speed and memory columns in {Path(out) / 'speed.json'}; leaderboard in "
          f"{Path(out) / 'leaderboard.md'}", file=sys.stderr)
    return 0
