"""The start of a run in one line, printed within seconds of launch, before the first step:

    gpt (small): 0.93M parameters, 2,048 tokens per step, cpu (x86_64, AVX512, bf16 native), fp32,
    2 threads; estimated 21 s per 100 steps, 3.5 min to the end (step 1000)

With the settings of this machine's calibration (``calibrate.py``) the estimate is three steps of
the model itself where they are cheap (``estimate``), else its training FLOPs at the rate the
calibration's reference reached; with ``auto`` settings, the FLOPs at the rate the autotune
measured (``autotune.py``: its matmul probe, or the model itself where precision was timed); after
the first steps one more line gives the measured time. Training FLOPs per token are 6 N + 12 L d T (Kaplan et al.
2020, section 2.1; PaLM, appendix B): N the weights one token passes through (a shared block
counted at every application, the embedding lookup not at all), L layers, T the keys a query
sees (memory included).
"""
from __future__ import annotations

import copy
import dataclasses
import platform
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn

from ..build import build
from ..base.hardware import cpu_has_bf16
from ..spec.sizes import flops_per_unit
from ..spec import Spec
from . import autotune, calibrate
from .distributed import Dist
from .evaluate import carried_state, to_device
from .task import Task

if TYPE_CHECKING:
    from .config import TrainConfig

TELL_STEPS, TELL_S = 10, 30.0  # the measured line: after this many steps, or seconds if sooner
ESTIMATE_S = 1.5  # the most the start spends timing the model for its estimate (``estimate``)


def matmul_shape(spec: Spec | None, units: int) -> tuple[int, int, int]:
    """The run's feed-forward product (rows, d_model, d_ff), rows cut so one product is ~0.4 GFLOP."""
    d, d_ff = (spec.d_model, spec.d_ff) if spec is not None else (256, 1024)
    return max(64, min(units, int(4e8 // (2 * d * d_ff)))), d, d_ff


@dataclasses.dataclass
class Start:
    """What the start of a run decides its speed settings and its first line from."""

    train: TrainConfig
    member: str
    size: str | None                  # the size preset's name (None: a model given ready-made)
    spec: Spec | None                 # None: a model given ready-made (``model``)
    model: nn.Module
    params: int
    task: Task
    device: torch.device
    dist: Dist
    meta: dict | None                 # the checkpoint's, for a resumed run
    notes: list[str]                  # lines printed after the first one; appended to
    units_per_step: int               # batch x accumulation x the task's length (a text task's tokens exactly)


def to_time(s: Start, precision: str) -> tuple[bool, bool]:
    """Whether the run times threads and precision now (``auto``: a probe in this run); ``precision``:
    the one resolved so far. bf16 on a CPU is not always faster, so auto times it there; on CUDA it is
    kept. Resumed runs keep what they ran with; multi-process runs keep the static precision (ranks must agree)."""
    t, cpu, fresh = s.train, s.device.type == "cpu", s.meta is None
    return (t.threads == "auto" and cpu and fresh,
            t.precision == "auto" and cpu and precision == "bf16" and fresh and not s.dist.active)


def sources(s: Start, precision: str) -> dict[str, str]:
    """Where the run's threads and precision come from: set (the config), probe (``auto``),
    calibration (``machine``, this machine's stored one), conservative (``machine`` before a
    calibration), checkpoint (a resumed run), device (CUDA, or a CPU without native bf16),
    default (torch's own thread count)."""
    t, cpu, fresh = s.train, s.device.type == "cpu", s.meta is None
    ran = s.meta or {}
    threads = ("set" if isinstance(t.threads, int) else "default" if t.threads is None or not cpu else
               "probe" if fresh and t.threads == "auto" else "machine" if fresh else
               "checkpoint" if isinstance(ran.get("threads"), int) else "default")
    precision = ("set" if t.precision not in ("auto", "machine") else "checkpoint" if not fresh else
                 "probe" if to_time(s, precision)[1] else
                 "machine" if t.precision == "machine" and cpu and precision == "bf16" and not s.dist.active
                 else "device")
    return {"threads": threads, "precision": precision}


Measure = Callable[[list[tuple[int, str]], float | None], dict]  # settings, seconds -> units/s each


def tune(s: Start, precision: str, threads: bool, time_precision: bool,
         measure: Measure) -> tuple[autotune.Choice, dict[str, str]]:
    """Decide the run's threads and precision: this machine's calibration where the config says
    ``machine`` (``calibrate.py``), a probe where it says ``auto`` (``autotune.choose``; ``threads``,
    ``time_precision``: ``to_time``). ``measure``: time the model (``measure`` below). Returns the choice
    and where each setting came from (``sources``, with machine resolved)."""
    world = s.dist.world_size
    flops = flops_per_unit(s.spec, s.params, s.task.seq_len) * s.units_per_step / world
    cal, precision, src = _machine(s, precision)
    if cal is not None and not threads and not time_precision:
        n = torch.get_num_threads()
        rate = cal.rate(n, precision)
        if rate:  # the reference's measured FLOP/s at this setting, then the model's own steps where cheap
            step_s = estimate(s, n, precision, flops / rate, measure)
            return autotune.Choice(n, precision, None, None, step_s), src
    return autotune.choose(precision, threads=threads, time_precision=time_precision, device=s.device,
                           shape=matmul_shape(s.spec, s.units_per_step // world), step_flops=flops,
                           units=s.units_per_step, measure=measure), src


def estimate(s: Start, threads: int, precision: str, step_s: float, measure: Measure) -> float:
    """The step time ``step_s`` predicted from FLOPs, replaced by three steps of a copy of the model
    (one untimed) where they are predicted to take under ``ESTIMATE_S``: FLOPs miss what a member
    does beyond its matrix products (LSH hashing and sorting, a reversible stack's recomputation,
    many small kernels), which made the first estimate of some members several times too low. The
    settings are decided already; this only times them, leaving the run's RNG and data as they were."""
    if 3 * step_s >= ESTIMATE_S or s.spec is None:  # a ready-made model (an RL policy): its batch is a
        return step_s                                # rollout that one backward consumes, not replayable
    rates = measure([(threads, precision)], 4 * ESTIMATE_S)  # a member far slower than its FLOPs stops early
    return s.units_per_step / rates[(threads, precision)] if rates else step_s


def _machine(s: Start, precision: str) -> tuple[calibrate.Calibration | None, str, dict[str, str]]:
    """Apply this machine's calibration (or the conservative setting) to the parts of the run's
    setting that come from it: (the calibration or None, the precision, ``sources`` resolved)."""
    src = sources(s, precision)
    wanted = [k for k, v in src.items() if v == "machine"]
    if not wanted:
        return None, precision, src
    width = s.spec.d_model if s.spec is not None else 256
    # Ranks of one run share the machine: they read a stored calibration but never time one together.
    cal = (calibrate.settle(width, s.notes) if not s.dist.active else calibrate.read(calibrate.bucket(width)))
    n, p = calibrate.conservative(calibrate.bucket(width)) if cal is None else (cal.threads, cal.precision)
    for k in wanted:
        src[k] = "calibration" if cal is not None else "conservative"
    if "threads" in wanted:
        torch.set_num_threads(max(1, n // s.dist.world_size))
        if cal is not None:
            loaded, load, cores = calibrate.busy()
            if loaded and n > 1:
                s.notes.append(f"the load average is {load:.1f} on {cores} cores: {n} threads may run several "
                               f"times slower than one here; train.threads=1 trains on one")
    if "precision" in wanted:
        precision = p if cal is None or "threads" in wanted else cal.best_precision(torch.get_num_threads())
    return cal, precision, src


def measure(s: Start, settings: list[tuple[int, str]], budget_s: float | None = None) -> dict:
    """Units/s per setting on the run's first batch (``autotune.probe``); the task's
    position is restored. A state the run carries from batch to batch (XL memory) is filled
    first, so the timed steps attend over ``mem_len`` + ``seq_len`` keys as every step after the
    first few of the run does: timed with an empty memory, Transformer-XL's first estimate was
    0.59 of its measured step (docs/results/training.md)."""
    position = s.task.state_dict()
    batch = s.task.next()
    s.task.load_state_dict(position)

    def make() -> nn.Module:  # a throwaway copy (a model given ready-made is copied)
        model = (build(s.spec) if s.spec is not None else copy.deepcopy(s.model)).to(s.device)
        state = carried_state(model, s.task.carries_state)
        if state is None:
            return model
        mem_len = s.spec.state.mem_len if s.spec is not None else 0
        with torch.no_grad():  # ceil(mem_len / seq_len) segments fill it; the first fills an RNN's state
            for _ in range(max(1, -(-mem_len // s.task.seq_len))):
                model.loss({**to_device(batch, s.device), "state": state})
        return _Carrying(model, state)
    return autotune.probe(make, batch, s.task.size(batch), s.device, settings, budget_s=budget_s)


class _Carrying(nn.Module):
    """``model.loss`` with a carried ``state`` (the probe's steps keep it full, as the run's do)."""

    def __init__(self, model: nn.Module, state):
        super().__init__()
        self.model, self.state = model, state

    def loss(self, batch: dict):
        return self.model.loss({**batch, "state": self.state})


def _device(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    bf16 = "bf16 native" if cpu_has_bf16() else "bf16 emulated"
    return f"cpu ({platform.machine()}, {torch.backends.cpu.get_cpu_capability()}, {bf16})"


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def to_end(step_s: float, step: int, max_steps: int | None, budget_s: float | None, elapsed: float,
           time_budget: str | None) -> str:
    """The time to the run's end at ``step_s`` a step: to ``max_steps`` or the budget, whichever comes first."""
    left = []
    if max_steps is not None:
        left.append((max(0, max_steps - step) * step_s, f"step {max_steps}"))
    if budget_s is not None:
        left.append((max(0.0, budget_s - elapsed), f"time budget {time_budget}"))
    seconds, what = min(left)
    return f"{duration(seconds)} to the end ({what})"


def first_line(s: Start, precision: str, speed_from: dict[str, str], step_s: float, to_end: str) -> str:
    """Member, size, parameters, units per step, device, precision, threads and the estimate
    (``to_end``: the time to the end at ``step_s``)."""
    size = f" ({s.size})" if s.spec is not None else ""
    n = torch.get_num_threads()
    unit = "environment steps per update" if s.task.unit == "steps" else f"{s.task.unit} per step"
    return (f"{s.member}{size}: {s.params / 1e6:.2f}M parameters, {s.units_per_step:,} {unit}, "
            f"{_device(s.device)}, {precision}, {n} thread{'s' * (n > 1)}{_from(speed_from)}; estimated "
            f"{duration(100 * step_s)} per 100 steps, {to_end}")


# How the start line names where the speed settings came from (``sources``); set ones go unnamed.
_FROM = {"calibration": "this machine's calibration", "conservative": "uncalibrated, conservative",
         "probe": "timed now", "checkpoint": "as the run ran"}


def _from(speed_from: dict[str, str]) -> str:
    said = {}
    for what, source in speed_from.items():
        if source in _FROM:
            said.setdefault(_FROM[source], []).append(what)
    return "".join(f" ({' and '.join(w)}: {s})" for s, w in said.items())


def tell(ran: int, train_s: float) -> bool:
    """Whether to print the measured line now (once per process): after ``TELL_STEPS`` steps or
    ``TELL_S`` seconds of training."""
    return ran == TELL_STEPS or (ran < TELL_STEPS and train_s >= TELL_S)


def measured_line(ran: int, train_s: float, to_end: Callable[[float], str]) -> str:
    step_s = train_s / max(ran, 1)
    return f"measured over {ran} steps: {duration(100 * step_s)} per 100 steps, {to_end(step_s)}"
