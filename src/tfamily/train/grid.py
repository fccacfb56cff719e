"""One grid runner for comparisons: every cell of a grid (the arena's tasks x members x seeds, the
RL sweep's environments x torsos x seeds) is a run directory of the shared loop, resumable and
shardable the same way.

A cell is a directory and its *plan*, the dict of settings that must match for the directory to
be continued. ``status(dir, plan, finished)`` decides what a later run of the grid does with it:

* a directory whose ``plan.json`` differs from the plan (on a key not in ``may_change``) is
  refused, one line naming each key as ``saved -> asked``;
* ``done``: ``finished(dir)`` says the cell reached its end (its result, its leaderboard row);
* ``resume``: it was killed after a complete checkpoint, and continues from the newest (the
  loop's exact resume);
* ``new``: nothing to continue from (``start`` empties a directory killed before its first
  checkpoint).

``shard(cells, "i/n")`` keeps cells i, i + n, i + 2n, ... of the grid's fixed order, so n machines
sharing or merging one output directory cover the grid exactly once. Imports nothing heavy at
module level (``tfamily rl sweep --help`` stays fast).

One process at a time works on a cell: the runner takes the cell's lock (``cell_lock``: the run
directory lock of ``rundir.py`` on ``<dir>/.cell.lock``, a file apart from the lock the shared
loop takes on the run inside) before it reads the cell's status, and holds it while the cell is
emptied, planned, trained and its result written. A second run of the grid over the same
directory (the same command started twice, or two machines sharing it) finds the cell held and
skips it with a line naming the holder, so no cell is ever trained by two processes; emptying a
cell keeps the lock file.

``run_cells(cells, work)`` is the whole loop for a grid whose cell is one function call (the
reproductions' settings x seeds): each cell of the shard that has no ``cell.json`` yet is
emptied, planned and handed to ``work(dir)``, whose JSON result is written to
``<dir>/cell.json`` when it returns; a killed grid reruns only the cells without one. It
returns every cell's result in the grid's order (None where another shard has not finished it),
so a command writes its tables from what is finished, and a rerun without ``--shard`` over the
shards' merged directories skips every cell and writes the whole table.
"""
from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from ..base.files import write_atomic
from ..base.numbers import cut
from ..base.textload import read_json

PLAN = "plan.json"
RESULT = "cell.json"
CELL_LOCK = ".cell.lock"  # not rundir.LOCK: the Trainer inside the cell takes that one itself
SHARD_HELP = "run cells I, I+N, I+2N, ... of the grid (N machines sharing or merging --out cover it once)"


def parse_shard(text: str | None) -> tuple[int, int]:
    """``'i/n'`` -> (i, n) with 0 <= i < n; None -> (0, 1)."""
    if text is None:
        return 0, 1
    i, sep, n = str(text).partition("/")
    if not sep or not i.strip().isdigit() or not n.strip().isdigit() or not 0 <= int(i) < int(n):
        raise ValueError(f"--shard {text}: give i/n with 0 <= i < n, e.g. --shard 0/2 and --shard 1/2")
    return int(i), int(n)


def shard(cells: list, text: str | None) -> list:
    """The cells of shard ``text`` (``'i/n'``; None: all of them)."""
    i, n = parse_shard(text)
    return cells[i::n]


def write_json(path: Path, data: dict) -> None:
    """``data`` as JSON at ``path``, atomically (a kill leaves the old file or the new one)."""
    write_atomic(path, json.dumps(data, indent=1))


def check_plan(d: Path, plan: dict, may_change: tuple[str, ...] = ()) -> None:
    """Refuse ``d`` when its saved plan differs from ``plan`` on a key not in ``may_change``."""
    path = Path(d) / PLAN
    if not path.is_file():
        return
    try:
        saved = read_json(path)
    except ValueError as e:
        raise ValueError(f"{e}; delete the cell's directory to rerun it") from None
    diffs = [f"{k}: saved {cut(saved.get(k))}, asked {cut(v)}" for k, v in plan.items()
             if k not in may_change and saved.get(k) != v]
    if diffs:
        raise ValueError(f"{d} was planned with other settings ({'; '.join(diffs)}); repeat its settings or pick "
                         f"another --out")


def write_plan(d: Path, plan: dict) -> None:
    Path(d).mkdir(parents=True, exist_ok=True)
    write_json(Path(d) / PLAN, plan)


def status(d: Path, plan: dict, finished: Callable[[Path], bool], *,
           may_change: tuple[str, ...] = ()) -> tuple[str, int | None]:
    """``("done", None)``, ``("resume", step)`` (the newest complete checkpoint) or ``("new", None)``
    for cell directory ``d`` planned as ``plan`` (the module docstring)."""
    from . import checkpoint
    d = Path(d)
    check_plan(d, plan, may_change)
    if finished(d):
        return "done", None
    if checkpoint.step_dirs(d / "checkpoints"):
        try:
            return "resume", checkpoint.load(d).meta["step"]
        except FileNotFoundError:  # only half-written checkpoints: nothing to continue from
            pass
    return "new", None


def cell_lock(d: Path):
    """This process's lock on cell ``d`` (a ``rundir.RunLock``; release it once the cell's result is
    written). Raises ``rundir.RunDirLocked``, whose ``holder`` names the live process, when another
    holds it."""
    from .rundir import RunLock
    return RunLock(d, CELL_LOCK)


def empty(d: Path) -> None:
    """Remove everything in ``d`` but its lock file, which the caller holds (removing it would let a
    second process lock a new file of the same name)."""
    for p in Path(d).iterdir():
        if p.name == CELL_LOCK:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def start(d: Path, plan: dict, kind: str) -> None:
    """Prepare ``d`` to train, holding its ``cell_lock``: empty it when there is nothing to resume,
    then write its plan."""
    if kind == "new" and Path(d).exists():
        empty(d)
    write_plan(d, plan)


def add_shard(parser) -> None:
    """The ``--shard I/N`` option every grid command reads the same way."""
    parser.add_argument("--shard", default=None, metavar="I/N", help=SHARD_HELP)


def args_plan(args, *, drop: Iterable[str] = ()) -> dict:
    """A command's plan for its cells: every JSON-able option of ``args`` but the grid's own axes
    (``drop``) and those that change no number (output, printing, sharding, parallel jobs, threads)."""
    skip = {"out", "json", "shard", "func", "data_dir", "jobs", "threads", "name", "command", *drop}
    simple = (str, int, float, bool, type(None))
    return {k: v for k, v in sorted(vars(args).items()) if k not in skip and not k.startswith("_")
            and (isinstance(v, simple) or isinstance(v, (list, tuple)) and all(isinstance(x, simple) for x in v))}


def read_plan(d: Path) -> dict:
    """The plan saved in cell directory ``d``."""
    return read_json(Path(d) / PLAN)


def read_result(d: Path) -> dict | None:
    path = Path(d) / RESULT
    return read_json(path) if path.is_file() else None


def run_cells(cells: list[tuple[Path, dict]], work: Callable[[Path], dict], *, shard: str | None = None,
              log: Callable[[str], None] | None = None, mapper: Callable = map) -> list[dict | None]:
    """Run the (directory, plan) ``cells`` of shard ``shard`` that are not finished through ``work``
    (``mapper``: ``map`` or a process pool's, with a picklable ``work``), each under its
    ``cell_lock``; every cell's result in order, None for one not finished (the module docstring)."""
    i, n = parse_shard(shard)
    for d, plan in cells:  # a changed cell anywhere in the grid is refused before any training
        check_plan(Path(d), plan)
    todo = []
    for d, plan in cells[i::n]:
        if (Path(d) / RESULT).is_file():
            if log:
                log(f"# {Path(d).name}: skipped, finished in {d}")
            continue
        todo.append((Path(d), plan))
    for (d, _), busy in zip(todo, mapper(_Work(work), todo)):
        if busy and log:
            log(f"# {d.name}: skipped, in use by {busy} (another run of this grid); rerun when it has finished")
    results = [read_result(Path(d)) for d, _ in cells]
    missing = sum(r is None for r in results)
    if missing and log:
        log(f"# {missing} of {len(cells)} cells not finished here (other shards): rerun without --shard over "
            f"the shards' merged directory to write the whole table")
    return results


class _Work:
    """``work`` on one (directory, plan) cell under the cell's lock, taken in the process that runs
    it (a pool's worker), with its result written beside the cell (picklable when ``work`` is).
    Returns '' when the cell is finished, else the holder of its lock."""

    def __init__(self, work: Callable[[Path], dict]):
        self.work = work

    def __call__(self, cell: tuple[Path, dict]) -> str:
        from .rundir import RunDirLocked
        d, plan = cell
        try:
            held = cell_lock(d)
        except RunDirLocked as e:
            return e.holder
        with held:  # a cell is one call: one killed, or started by nobody, starts over
            if status(d, plan, lambda d: (d / RESULT).is_file())[0] != "done":
                start(d, plan, "new")
                write_json(d / RESULT, self.work(d))
        return ""
