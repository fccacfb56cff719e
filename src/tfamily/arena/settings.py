"""`tfamily arena`'s settings, declared once: each field is a flag (its name, help, default and
check), ``PRESETS`` are named values of these fields, and ``grid.shared(arena)`` gives what every cell
shares (``grid.Settings``, the plan a cell is continued and merged by). No torch: the task names
and default lengths are the tasks' declarations."""
from __future__ import annotations

from dataclasses import dataclass, fields

from ..base.numbers import check_int
from ..base.options import parse_duration
from ..settings.schema import check, dest, setting
from . import ARENA_MEMBERS
from . import tasks as arena_tasks

# Presets: the settings of a named grid, each applied where the command line leaves the flag unset.
# arena-cpu is Long Range Arena's grid at CPU lengths (the arena's five default members) on the tasks
# where the dense baseline leaves chance within the budget (Pathfinder 16 and matching did not in 500
# steps), with a two-rate sweep: 53 minutes wall measured as two one-thread shards on a 2-core machine
# (docs/results/arena.md).
PRESETS = {"arena-cpu": {"tasks": ["listops", "mnist", "text"],
                         "length": ["listops=128", "mnist=14", "text=1024"],
                         "steps": ["600", "text=80"], "lr": [1e-3, 2e-3],
                         "seeds": 3, "batch_size": 16, "threads": 1}}
STEPS = 200  # per cell when neither --steps, --time nor --flops is given


def task_items(flag: str, items: list[str], example: str) -> dict[str, int]:
    """``["listops=512", "mnist=14"]`` -> ``{"listops": 512, "mnist": 14}``; a plain ``N`` under ""."""
    out = {}
    for item in items:
        name, eq, value = str(item).rpartition("=")
        if not value.strip().lstrip("-").isdigit() or (flag == "--length" and not eq):
            raise ValueError(f"{flag} {item}: give {'TASK=N' if flag == '--length' else 'N or TASK=N'}, "
                             f"e.g. {flag} {example}")
        out[arena_tasks.check_name(name) if eq else ""] = int(value)
    return out


def _lengths(flag: str, items: list[str]) -> None:
    for name, n in task_items(flag, items, "listops=512 mnist=14").items():
        arena_tasks.check_length(name, n)


def _steps(flag: str, items: list[str] | None) -> None:
    for name, n in task_items(flag, items or [], "600 text=150").items():
        check_int(f"{flag} {name}".strip(), n, 1, hint="e.g. --steps text=150" if name else "e.g. --steps 20")


def _duration(flag: str, value) -> None:
    parse_duration(value, flag)


@dataclass
class Arena:
    """Every setting of `tfamily arena` (its subcommands' few are declared with them in cli.py)."""
    members: list[str] = setting(list(ARENA_MEMBERS), flag=True, help="members to compare, each its bidirectional "
                                 "encoder; NAME:causal runs the decoder as it is")
    causal: bool = setting(False, flag=True, help="run every member given without a variant as NAME:causal (its "
                           "own causal pattern)")
    as_papers: bool = setting(False, flag=True, help="train each member's full preset (its paper's recipe); by "
                              "default every member is gpt's recipe with only its attention (pattern, kernel, "
                              "shared-QK heads, reversible depth), so the table compares attention alone, as Long "
                              "Range Arena does")
    tasks: list[str] = setting(["listops"], flag=True, help=", ".join(arena_tasks.names()))
    seeds: int = setting(1, flag=True, lo=1, help="seeds 0..N-1 per (task, member)")
    steps: list[str] | None = setting(None, flag=True, check=_steps, metavar="N|TASK=N", help=(
        f"training steps per cell (default {STEPS} without --time or --flops); TASK=N for one task, e.g. "
        f"--steps 600 text=150"))
    time: str | None = setting(None, flag=True, check=_duration, help="training time per member and seed instead: "
                               "300, 90s, 4m, 1h (a sweep of K --lr values gives each rate 1/K of it)")
    flops: float | None = setting(None, flag=True, lo=0.0, lo_open=True, hint="training FLOPs per cell, e.g. --flops "
                                  "2e12", help="training FLOPs per member and seed (e.g. 2e12; counted by the "
                                  "arena's rule: pairs a pattern visits, LSH chunks and hashing, every recurrent "
                                  "step); a sweep of K --lr values gives each rate's cell 1/K of it, so the sweep "
                                  "spends at most this; each cell stops when its share is spent (with --steps: "
                                  "whichever comes first)")
    length: list[str] = setting([], flag=True, check=_lengths, metavar="TASK=N", help=(
        "sequence length per task (mnist, pathfinder: the image side); defaults "
        + " ".join(f"{n}={arena_tasks.get(n).length}" for n in arena_tasks.names())))
    d_model: int = setting(64, flag=True, lo=1)
    layers: int = setting(2, flag=True, lo=1)
    heads: int = setting(4, flag=True, lo=1)
    batch_size: int = setting(16, flag=True, lo=1, help="examples per step")
    lr: list[float] = setting([1e-3], flag=True, lo=0.0, lo_open=True, help=(
        "learning rate; several: a sweep, every seed at each, the best by validation reported; --steps are per "
        "rate, a --flops or --time budget is split evenly among the rates, and the leaderboard's TFLOP and "
        "seconds count every rate"))
    match_params: bool = setting(True, flag=True, negatable=True, help="set each member's d_ff so its parameters "
                                 "are within 10% of the first member's")
    allow_param_mismatch: bool = setting(False, flag=True, help="train a member whose parameters d_ff cannot bring "
                                         "within 10% of the first member's (refused otherwise), marked † in every "
                                         "table")
    warmup: int | None = setting(None, flag=True, lo=0, help="warm-up steps (default: a tenth of --steps)")
    eval_examples: int = setting(256, flag=True, lo=1, help="validation and test examples per task")
    threads: int = setting(1, flag=True, lo=1, help="torch threads in every cell")
    precision: str = setting("fp32", flag=True, choices=("fp32", "bf16"))
    device: str = setting("cpu", flag=True, choices=("cpu", "cuda"))
    ckpt_every: int = setting(50, flag=True, lo=1, help="checkpoint every N steps (what a killed cell resumes from)")
    shard: str | None = setting(None, flag=True, metavar="I/N", help="run cells I, I+N, I+2N, ... of the grid")
    speed_rounds: int = setting(5, flag=True, lo=0, hint="e.g. --speed-rounds 5, or 0 to skip", help=(
        "after a complete unsharded grid, time every member alternating in this process for the speed and "
        "memory columns (`arena speed`) over N rounds (0: skip)"))
    out: str = setting("runs/arena", flag=True, help="the arena directory (one run directory per cell)")
    data_dir: str | None = setting(None, flag=True)
    preset: str | None = setting(None, flag=True, choices=tuple(PRESETS), help=(
        "a named grid: arena-cpu = listops 128, mnist 14 (600 steps), text 1024 (80 steps), batch 16, lr 1e-3 "
        "and 2e-3, 5 members, 3 seeds, 1 thread (53 min measured as two shards on 2 cores); flags given win"))


def apply_preset(args) -> None:
    """Fill the flags the command line did not give (None) from ``args.preset``, then from ``Arena``'s
    defaults. A task's TASK=N (or the plain N of --steps) given wins over the preset's for that task."""
    preset = PRESETS.get(args.preset, {})
    for key in ("length", "steps"):
        mine = list(getattr(args, key) or [])
        if key == "steps" and (args.time is not None or args.flops is not None):
            continue  # --time or --flops given: the preset's step budget gives way
        given = {str(item).rpartition("=")[0] for item in mine}
        merged = [v for v in preset.get(key, []) if v.rpartition("=")[0] not in given] + mine
        setattr(args, key, merged or None if key == "steps" else merged)
    for f in fields(Arena):
        if f.name not in ("length", "steps") and getattr(args, dest(f)) is None:
            setattr(args, dest(f), preset.get(f.name, f.default_factory() if callable(f.default_factory)
                                              else f.default))


def settings(args) -> Arena:
    """The checked settings of a parsed command line (after ``apply_preset``); each error names its flag."""
    s = Arena(**{f.name: getattr(args, dest(f)) for f in fields(Arena)})
    check(s, name=lambda f, key: f"--{key.replace('_', '-')}")
    if s.steps is not None and s.time is not None:
        raise ValueError("give --steps or --time, not both")
    if s.flops is not None and s.time is not None:
        raise ValueError("give --time or --flops, not both (--flops with --steps: whichever is spent first)")
    if s.d_model % s.heads:
        raise ValueError(f"--d-model {s.d_model} must be divisible by --heads {s.heads}")
    return s


@dataclass
class Merge:
    """`tfamily arena merge DIR...`."""
    dirs: list[str] = setting([], positional="DIR", nargs="+")
    out: str = setting(None, flag=True, required=True, help="where the merged leaderboard goes")


@dataclass
class Report:
    """`tfamily arena report DIR...`."""
    dirs: list[str] = setting([], positional="DIR", nargs="+", help="an arena --out directory (several: shards, "
                                                                   "merged)")
    out: str | None = setting(None, flag=True, help="the page (default DIR/report.html)")


@dataclass
class Speed:
    """`tfamily arena speed DIR...`."""
    dirs: list[str] = setting([], positional="DIR", nargs="+", help="an arena --out directory (several: shards, "
                                                                   "merged)")
    rounds: int = setting(5, flag=True, lo=1, hint="e.g. --rounds 5",
                          help="rounds of alternating steps per task (median reported)")
    out: str | None = setting(None, flag=True, help="where speed.json and the leaderboard go (default the first DIR)")
    data_dir: str | None = setting(None, flag=True)
