"""`tfamily arena`: run a grid of members x tasks x seeds and write its leaderboard; `tfamily arena
merge DIR...` writes the leaderboard of several shards' directories."""
from __future__ import annotations

import sys
from pathlib import Path

from ..base.options import parse_duration
from ..settings.schema import add_flags
from .settings import apply_preset, settings  # noqa: F401  (apply_preset: the flags a --preset fills)

HELP = ("members side by side on long-range tasks (ListOps, MNIST pixels, Pathfinder, text, document matching, "
        "byte-level language modelling): one leaderboard")


def add_parser(sub) -> None:
    from .settings import Arena, Merge, Report, Speed
    p = sub.add_parser("arena", help=HELP, description=HELP)
    add_flags(p, Arena, overrides=True)  # a flag not given: the --preset's value, else the default (apply_preset)
    p.set_defaults(func=_run)
    inner = p.add_subparsers(dest="arena_command", metavar="COMMAND")
    for name, cls, func, help_ in (
            ("merge", Merge, _merge, "the leaderboard of the finished cells of several arena directories"),
            ("report", Report, _report, "one self-contained HTML page: leaderboard, plots, learning curves"),
            ("speed", Speed, _speed, "the speed and memory columns: every member's training step timed alternating "
                                     "in one process, at its cells' shape")):
        q = inner.add_parser(name, help=help_)
        add_flags(q, cls)
        q.set_defaults(func=func)


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


def _run(args) -> int:
    from . import grid
    apply_preset(args)
    a = settings(args)
    s = grid.shared(a)
    i, n = grid.parse_shard(a.shard)
    members = [m if ":" in m or not a.causal else f"{m}:{grid.CAUSAL}" for m in a.members]
    cells = grid.grid(members, a.tasks, a.seeds, a.lr)
    grid.check_cells(cells, s)
    for m in dict.fromkeys(a.members):
        check_base(m, s.base)
    d_ff, off = grid.match_d_ff(cells, s, a.data_dir)
    grid.check_params(off, a.allow_param_mismatch)
    if s.time is not None:
        grid.check_budget(cells, s, parse_duration(s.cell_time, "--time"), a.data_dir, d_ff)
    for _, note in off.values():
        print(f"arena: {note}: trained as --allow-param-mismatch asks, marked † in every table", file=sys.stderr)
    per_step = grid.flops_steps(cells, s, a.data_dir, d_ff)
    mine = cells[i::n]
    print(f"arena: {len(mine)} of {len(cells)} cells{f' (shard {i}/{n})' if n > 1 else ''} -> {a.out}",
          file=sys.stderr)
    if s.sweep > 1 and (s.flops is not None or s.time is not None):
        budget = f"--flops {s.flops:.3g}" if s.flops is not None else f"--time {s.time}"
        print(f"arena: {budget} per member and seed, split over {s.sweep} learning rates (1/{s.sweep} each)",
              file=sys.stderr)
    todo = [c for c in mine if not (c.dir(a.out) / "cell.json").is_file()]
    if todo:
        from . import speed
        seconds = speed.estimate(todo, s, d_ff, per_step, a.data_dir)
        print(f"arena: {len(todo)} cell(s) to train, about {_duration(seconds)} in all (one training step of each "
              f"member timed here; evaluation included)", file=sys.stderr, flush=True)
    trained = _train(mine, a, s, d_ff, off, per_step)
    return _leaderboard(cells, a, s, whole=n == 1, trained=trained)


def _train(mine: list, a, s, d_ff: dict, off: dict, per_step: dict) -> bool:
    """Train the cells of this shard in order; whether any was trained here."""
    from . import grid, table
    trained = False
    for k, cell in enumerate(mine, 1):
        key = (cell.task, cell.member)
        gap = off.get(key, (None,))[0]
        row, what = grid.run_cell(cell, s, a.out, a.data_dir, d_ff[key], per_step[key], gap)
        lr = "" if cell.lr is None else f" lr {grid.lr_text(cell.lr)}"
        if row is None:
            print(f"[{k}/{len(mine)}] {cell.task} {cell.member}{lr} seed {cell.seed}: skipped, in use by {what} "
                  f"(another arena run over {a.out})", file=sys.stderr, flush=True)
            continue
        trained = trained or what != "skipped"
        print(f"[{k}/{len(mine)}] {cell.task} {cell.member}{lr} seed {cell.seed}: {what}, test "
              f"{table.score(row)}{'%' if row.get('metric', 'acc') == 'acc' else ''}, {row['steps']} steps, "
              f"{row['train_s']:.1f} s, {row['params']:,}{table.MARK if row.get('params_off') is not None else ''} "
              f"params (d_ff {row['d_ff']})", file=sys.stderr, flush=True)
    return trained


def _leaderboard(cells: list, a, s, whole: bool, trained: bool) -> int:
    """The leaderboard of the grid's finished cells; after a whole grid, its speed columns first."""
    from . import table
    wanted = {(c.task, c.member, c.seed, s.lr_of(c)) for c in cells}
    done = table.collect([a.out], keep=lambda r: (r["task"], r["member"], r["seed"], r.get("lr", s.lr)) in wanted)
    timed = (Path(a.out) / "speed.json").is_file()
    if whole and len(done) == len(cells) and a.speed_rounds and (trained or not timed):
        from . import speed
        print(f"arena: timing every member alternating ({a.speed_rounds} rounds per task) for the speed and "
              f"memory columns", file=sys.stderr, flush=True)
        speed.write([a.out], a.out, a.speed_rounds, a.data_dir)
    rows = table.write(a.out, done, table.load_speed([a.out]))
    print(table.markdown(rows), end="")
    missing = len(cells) - len(done)
    if missing:
        print(f"arena: {missing} cell(s) of the grid not finished in {a.out} yet (other shards); "
              f"`tfamily arena merge` their directories when they are", file=sys.stderr)
    print(f"arena: leaderboard in {Path(a.out) / 'leaderboard.md'}", file=sys.stderr)
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
