"""`tfamily arena speed DIR`: the leaderboard's speed and memory columns, measured alternating in
one process on one machine.

A cell's own tokens/s depends on what else the machine ran during its minutes (other cells of a
parallel shard, other jobs), so the leaderboard does not rank members by it. Here, for each task of
the arena directory, every member's model is built at its cells' exact shape (length, batch, d_ff,
width, depth, precision, threads, from the cell's ``plan.json``) and one training step on the
task's first batch (forward and backward: ``model.loss(batch).backward()``) is timed: one warm-up
step each, then ``rounds`` rounds in which the members take turns, the order rotated every round, so
a slow minute of the machine falls on every member alike. A member's tokens/s is its batch's tokens
(padding included) over its median step time. Peak memory is measured in one child process
started with the allocator settings that make the resident set follow live tensors
(``bench/procmem.py``), the same models, one warm-up step then one measured step each (on CUDA:
``torch.cuda.max_memory_allocated`` in this process). The rows, labelled with the machine, go to
``DIR/speed.json`` / ``.csv``, and the leaderboard's tokens/s and peak MiB come from them
(``table.summarize``).
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .files import read_plan

if TYPE_CHECKING:
    from . import grid

FIELDS = ["task", "member", "length", "batch", "tokens_per_step", "rounds", "tokens_per_s", "step_ms", "step_ms_min",
          "step_ms_max", "peak_mb", "peak_exact", "threads", "precision", "device", "machine"]


def machine(device: torch.device) -> str:
    """The machine kind the numbers belong to: the GPU's name, or the CPU's model, cores and vector
    extension (no commas: the label goes into CSV files)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device).replace(",", ";")
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), name)
    except OSError:
        pass
    cpu = torch.backends.cpu.get_cpu_capability()
    return f"{name} ({os.cpu_count()} CPUs; {cpu})".replace(",", ";")


def plans(dirs: list[str | Path]) -> dict[str, dict[str, dict]]:
    """task -> member -> the ``plan.json`` of one finished cell of that (task, member), in the
    order the grid runs them. The learning rate and seed do not change a step's shape."""
    out: dict[str, dict[str, dict]] = {}
    for d in dirs:
        for path in sorted(Path(d).glob("*/*/cell.json")):
            plan = read_plan(path.parent / "plan.json")
            out.setdefault(plan["task"], {}).setdefault(plan["member"], plan)
    if not out:
        raise ValueError(f"no finished arena cells (<task>/<member>-s<seed>/cell.json) under "
                         f"{' '.join(map(str, dirs))}; run `tfamily arena --out DIR` first")
    return out


def model_and_batch(plan: dict, data_dir=None) -> tuple[torch.nn.Module, dict]:
    """The cell's model (built, untrained) and its task's first training batch, on the plan's device."""
    from ..build import build
    from ..train.evaluate import to_device
    from ..train.resolve import make_spec
    from . import grid, tasks
    s = grid.Settings(**{f.name: plan[f.name] for f in fields(grid.Settings) if f.name in plan and f.name != "lengths"},
                      lengths={plan["task"]: plan["length"]})
    cell = grid.Cell(plan["task"], plan["member"], 0)
    task = tasks.make(cell.task, plan["length"], batch_size=s.batch_size, seed=0, eval_examples=1, data_dir=data_dir)
    spec, _ = make_spec(grid.config(cell, s, Path("."), task.n_classes, plan.get("d_ff")), task.vocab_size,
                        tasks.seq_len(cell.task, plan["length"]))
    device = torch.device(s.device)
    return build(spec).to(device).train(), to_device(tasks.first_batch(task), device)


def step(model: torch.nn.Module, batch: dict, device: torch.device, precision: str) -> None:
    """One training step's forward and backward (the optimiser's update is the same for every member
    of a parameter count, and is left out)."""
    from ..train.device import autocast
    model.zero_grad(set_to_none=True)
    with autocast(device, precision):
        loss, _ = model.loss(batch)
    loss.backward()


def alternate(members: dict[str, tuple], rounds: int, meter, run=step) -> dict[str, list[float]]:
    """Seconds of ``rounds`` steps of each member, the members taking turns (the order rotated by
    one every round) after one warm-up step each. ``members``: name -> (model, batch, device,
    precision)."""
    names = list(members)
    for name in names:
        run(*members[name])
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            seconds[name].append(meter.seconds(lambda: run(*members[name]))[1])
    return seconds


def measure_task(task_plans: dict[str, dict], rounds: int, data_dir=None) -> list[dict]:
    """Time every member of one task alternating (``alternate``) in this process: one row each."""
    from ..bench.devices import meter
    first = next(iter(task_plans.values()))
    device = torch.device(first["device"])
    if first.get("threads"):
        torch.set_num_threads(first["threads"])
    members = {}
    for name, plan in task_plans.items():
        model, batch = model_and_batch(plan, data_dir)
        members[name] = (model, batch, device, plan["precision"])
    seconds = alternate(members, rounds, meter(device))
    rows = []
    for name, plan in task_plans.items():
        tokens, med = members[name][1]["x"].numel(), statistics.median(seconds[name])
        rows.append({"task": plan["task"], "member": name, "length": plan["length"], "batch": plan["batch_size"],
                     "tokens_per_step": tokens, "rounds": rounds, "tokens_per_s": tokens / med,
                     "step_ms": 1e3 * med, "step_ms_min": 1e3 * min(seconds[name]),
                     "step_ms_max": 1e3 * max(seconds[name]), "threads": torch.get_num_threads(),
                     "precision": plan["precision"], "device": device.type, "machine": machine(device)})
    return rows


def estimate(cells: list[grid.Cell], s: grid.Settings, d_ff: dict, per_step: dict, data_dir=None) -> float:
    """Seconds ``cells`` should take to train and evaluate here, for the line printed before a grid
    starts: one training step of each (task, member) timed (``measure_task``, one round
    after a warm-up), times the cell's steps, plus its validation and test passes (a forward pass
    taken as a third of a step); a time budget counts as its share."""
    import math

    from ..base.options import parse_duration
    from . import grid
    step_s = {}
    for task in dict.fromkeys(c.task for c in cells):
        plans = {c.member: s.plan(c, d_ff.get((c.task, c.member))) for c in cells if c.task == task}
        step_s.update({(task, r["member"]): r["step_ms"] / 1e3 for r in measure_task(plans, 1, data_dir)})
    total = 0.0
    for c in cells:
        one = step_s[(c.task, c.member)]
        steps = grid.steps_of(s, c.task, per_step[(c.task, c.member)])
        train = one * steps if steps is not None else parse_duration(s.cell_time, "--time")
        total += train + 2 * math.ceil(s.eval_examples / s.batch_size) * one / 3
    return total


def peaks(task_plans: dict[str, dict], data_dir=None) -> dict[str, tuple[float, bool]]:
    """member -> (peak MiB of one training step, whether the figure is exact), measured here: one
    warm-up step each first, then one measured step each (``bench/devices.py``'s meter)."""
    from ..bench.devices import meter
    first = next(iter(task_plans.values()))
    device = torch.device(first["device"])
    if first.get("threads"):
        torch.set_num_threads(first["threads"])
    m, out = meter(device), {}
    for name, plan in task_plans.items():
        model, batch = model_and_batch(plan, data_dir)
        step(model, batch, device, plan["precision"])
        model.zero_grad(set_to_none=True)
        _, peak, exact = m.peak_mb(lambda: step(model, batch, device, plan["precision"]))
        out[name] = (peak, exact)
        del model, batch
    return out


def _child_peaks(task_plans: dict[str, dict], data_dir=None) -> dict[str, tuple[float, bool]]:
    """``peaks`` in a child process with the tracked allocator (``procmem.worker_env``)."""
    from ..bench.procmem import worker_env
    cmd = [sys.executable, "-m", "tfamily.arena.speed", json.dumps({"plans": task_plans, "data_dir": data_dir})]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=worker_env())
    if proc.returncode != 0:
        raise RuntimeError(f"arena speed: the memory measurement failed:\n{proc.stderr[-2000:]}")
    return {k: tuple(v) for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}


def measure(dirs: list[str | Path], rounds: int = 5, data_dir=None) -> list[dict]:
    """One row per (task, member) of the finished cells of ``dirs``: median tokens/s over
    ``rounds`` alternating rounds and the peak memory of one training step."""
    from ..base.numbers import check_int
    check_int("--rounds", rounds, 1, hint="e.g. --rounds 5")
    rows = []
    for task, task_plans in plans(dirs).items():
        timed = measure_task(task_plans, rounds, data_dir)
        cuda = next(iter(task_plans.values()))["device"] == "cuda"
        memory = peaks(task_plans, data_dir) if cuda else _child_peaks(task_plans, data_dir)
        for row in timed:
            peak, exact = memory[row["member"]]
            rows.append({**row, "peak_mb": peak, "peak_exact": exact})
    return rows


def write(dirs: list[str | Path], out: str | Path, rounds: int = 5, data_dir=None) -> list[dict]:
    """Measure (``measure``), write ``out/speed.json`` / ``.csv``, and rewrite ``out``'s leaderboard
    with the measured columns; return the speed rows."""
    from ..bench.results import write_rows
    from . import table
    rows = measure(dirs, rounds, data_dir)
    write_rows(out, "speed", rows, FIELDS)
    table.write(out, table.collect(dirs), table.load_speed([out]))
    return rows


if __name__ == "__main__":  # the memory child of ``_child_peaks``
    job = json.loads(sys.argv[1])
    print(json.dumps(peaks(job["plans"], job["data_dir"])))
