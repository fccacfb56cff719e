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
import platform

import torch
from torch import nn

from ..build import build
from ..hardware import cpu_has_bf16
from ..sizes import param_count
from ..spec import Spec
from . import autotune, calibrate
from .evaluate import carried_state, to_device

TELL_STEPS, TELL_S = 10, 30.0  # the measured line: after this many steps, or seconds if sooner
ESTIMATE_S = 1.5  # the most the start spends timing the model for its estimate (``estimate``)


def flops_per_unit(spec: Spec | None, params: int, seq_len: int) -> float:
    """Training FLOPs per token of ``spec`` at ``seq_len`` (6 x ``params`` for a model given ready-made)."""
    if spec is None:
        return 6.0 * params
    d = spec.d_model
    n = param_count(spec) - (0 if spec.tie_embeddings else spec.vocab_size * d)
    n -= spec.position.max_len * d if spec.position.name == "learned" else 0
    if spec.depth.name in ("rnn", "lstm", "gru"):
        return 6.0 * n
    layers = spec.depth.n_layers + ((spec.depth.n_enc_layers or spec.depth.n_layers)
                                    if spec.model == "encoder_decoder" else 0)
    keys = seq_len + spec.state.mem_len
    return 6.0 * n + 12.0 * layers * spec.heads.n_heads * spec.d_head * keys


def matmul_shape(spec: Spec | None, units: int) -> tuple[int, int, int]:
    """The run's feed-forward product (rows, d_model, d_ff), rows cut so one product is ~0.4 GFLOP."""
    d, d_ff = (spec.d_model, spec.d_ff) if spec is not None else (256, 1024)
    return max(64, min(units, int(4e8 // (2 * d * d_ff)))), d, d_ff


def to_time(tr) -> tuple[bool, bool]:
    """Whether the trainer ``tr`` times threads and precision now (``auto``: a probe in this run).
    bf16 on a CPU is not always faster, so auto times it there; on CUDA it is kept. Resumed runs
    keep what they ran with; multi-process runs keep the static precision (ranks must agree)."""
    t, cpu, fresh = tr.cfg.train, tr.device.type == "cpu", tr.ckpt is None
    return (t.threads == "auto" and cpu and fresh,
            t.precision == "auto" and cpu and tr.precision == "bf16" and fresh and not tr.dist.active)


def sources(tr) -> dict[str, str]:
    """Where the run's threads and precision come from: set (the config), probe (``auto``),
    calibration (``machine``, this machine's stored one), conservative (``machine`` before a
    calibration), checkpoint (a resumed run), device (CUDA, or a CPU without native bf16),
    default (torch's own thread count)."""
    t, cpu, fresh = tr.cfg.train, tr.device.type == "cpu", tr.ckpt is None
    ran = (tr.ckpt.meta if tr.ckpt is not None else {})
    threads = ("set" if isinstance(t.threads, int) else "default" if t.threads is None or not cpu else
               "probe" if fresh and t.threads == "auto" else "machine" if fresh else
               "checkpoint" if isinstance(ran.get("threads"), int) else "default")
    precision = ("set" if t.precision not in ("auto", "machine") else "checkpoint" if not fresh else
                 "probe" if to_time(tr)[1] else
                 "machine" if t.precision == "machine" and cpu and tr.precision == "bf16" and not tr.dist.active
                 else "device")
    return {"threads": threads, "precision": precision}


def tune(tr, threads: bool, precision: bool) -> autotune.Choice:
    """Decide the trainer ``tr``'s threads and precision: this machine's calibration where the config
    says ``machine`` (``calibrate.py``), a probe where it says ``auto`` (``autotune.choose``). The
    units of a step are counted as batch x accumulation x the task's length (a text task's tokens
    exactly). Sets ``tr.speed_from`` (``sources``, with machine resolved)."""
    t, world = tr.cfg.train, tr.dist.world_size
    tr.units_per_step = units = t.batch_size * t.accum * tr.task.seq_len
    flops = flops_per_unit(tr.spec, tr.params, tr.task.seq_len) * units / world
    cal = _machine(tr)
    if cal is not None and not threads and not precision:
        n = torch.get_num_threads()
        rate = cal.rate(n, tr.precision)
        if rate:  # the reference's measured FLOP/s at this setting, then the model's own steps where cheap
            return autotune.Choice(n, tr.precision, None, None, estimate(tr, n, flops / rate, units))
    return autotune.choose(tr.precision, threads=threads, time_precision=precision, device=tr.device,
                           shape=matmul_shape(tr.spec, units // world), step_flops=flops, units=units,
                           measure=tr._measure)


def estimate(tr, threads: int, step_s: float, units: int) -> float:
    """The step time ``step_s`` predicted from FLOPs, replaced by three steps of a copy of the model
    (one untimed) where they are predicted to take under ``ESTIMATE_S``: FLOPs miss what a member
    does beyond its matrix products (LSH hashing and sorting, a reversible stack's recomputation,
    many small kernels), which made the first estimate of some members several times too low. The
    settings are decided already; this only times them, leaving the run's RNG and data as they were."""
    if 3 * step_s >= ESTIMATE_S or tr.spec is None:  # a ready-made model (an RL policy): its batch is a
        return step_s                                 # rollout that one backward consumes, not replayable
    rates = tr._measure([(threads, tr.precision)], 4 * ESTIMATE_S)  # a member far slower than its FLOPs stops early
    return units / rates[(threads, tr.precision)] if rates else step_s


def _machine(tr) -> calibrate.Calibration | None:
    """Apply this machine's calibration (or the conservative setting) to the parts of ``tr``'s
    setting that come from it; the calibration, or None."""
    tr.speed_from = src = sources(tr)
    wanted = [k for k, v in src.items() if v == "machine"]
    if not wanted:
        return None
    width = tr.spec.d_model if tr.spec is not None else 256
    # Ranks of one run share the machine: they read a stored calibration but never time one together.
    cal = (calibrate.settle(width, tr.notes) if not tr.dist.active else calibrate.read(calibrate.bucket(width)))
    n, p = calibrate.conservative(calibrate.bucket(width)) if cal is None else (cal.threads, cal.precision)
    for k in wanted:
        src[k] = "calibration" if cal is not None else "conservative"
    if "threads" in wanted:
        torch.set_num_threads(max(1, n // tr.dist.world_size))
        if cal is not None:
            loaded, load, cores = calibrate.busy()
            if loaded and n > 1:
                tr.notes.append(f"the load average is {load:.1f} on {cores} cores: {n} threads may run several "
                                f"times slower than one here; train.threads=1 trains on one")
    if "precision" in wanted:
        tr.precision = p if cal is None or "threads" in wanted else cal.best_precision(torch.get_num_threads())
    return cal


def measure(tr, settings: list[tuple[int, str]], budget_s: float | None = None) -> dict:
    """Units/s per setting on the trainer ``tr``'s first batch (``autotune.probe``); the task's
    position is restored. A state the run carries from batch to batch (XL memory) is filled
    first, so the timed steps attend over ``mem_len`` + ``seq_len`` keys as every step after the
    first few of the run does: timed with an empty memory, Transformer-XL's first estimate was
    0.59 of its measured step (docs/results/training.md)."""
    position = tr.task.state_dict()
    batch = tr.task.next()
    tr.task.load_state_dict(position)

    def make() -> nn.Module:  # a throwaway copy (a model given ready-made is copied)
        model = (build(tr.spec) if tr.spec is not None else copy.deepcopy(tr.model)).to(tr.device)
        state = carried_state(model, tr.task.carries_state)
        if state is None:
            return model
        mem_len = tr.spec.state.mem_len if tr.spec is not None else 0
        with torch.no_grad():  # ceil(mem_len / seq_len) segments fill it; the first fills an RNN's state
            for _ in range(max(1, -(-mem_len // tr.task.seq_len))):
                model.loss({**to_device(batch, tr.device), "state": state})
        return _Carrying(model, state)
    return autotune.probe(make, batch, tr.task.size(batch), tr.device, settings, budget_s=budget_s)


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


def _to_end(tr, step_s: float) -> str:
    t = tr.cfg.train
    left = []
    if t.max_steps is not None:
        left.append((max(0, t.max_steps - tr.step) * step_s, f"step {t.max_steps}"))
    if tr.budget.seconds is not None:
        left.append((max(0.0, tr.budget.seconds - tr.elapsed), f"time budget {t.time_budget}"))
    seconds, what = min(left)
    return f"{duration(seconds)} to the end ({what})"


def first_line(tr, step_s: float) -> str:
    """Member, size, parameters, units per step, device, precision, threads and the estimate."""
    size = f" ({tr.cfg.size})" if tr.spec is not None else ""
    n = torch.get_num_threads()
    unit = "environment steps per update" if tr.task.unit == "steps" else f"{tr.task.unit} per step"
    return (f"{tr.cfg.member}{size}: {tr.params / 1e6:.2f}M parameters, {tr.units_per_step:,} {unit}, "
            f"{_device(tr.device)}, {tr.precision}, {n} thread{'s' * (n > 1)}{_from(tr)}; estimated "
            f"{duration(100 * step_s)} per 100 steps, {_to_end(tr, step_s)}")


# How the start line names where the speed settings came from (``sources``); set ones go unnamed.
_FROM = {"calibration": "this machine's calibration", "conservative": "uncalibrated, conservative",
         "probe": "timed now", "checkpoint": "as the run ran"}


def _from(tr) -> str:
    said = {}
    for what, source in getattr(tr, "speed_from", {}).items():
        if source in _FROM:
            said.setdefault(_FROM[source], []).append(what)
    return "".join(f" ({' and '.join(w)}: {s})" for s, w in said.items())


def tell(ran: int, train_s: float) -> bool:
    """Whether to print the measured line now (once per process): after ``TELL_STEPS`` steps or
    ``TELL_S`` seconds of training."""
    return ran == TELL_STEPS or (ran < TELL_STEPS and train_s >= TELL_S)


def measured_line(tr, ran: int, train_s: float) -> str:
    step_s = train_s / max(ran, 1)
    return f"measured over {ran} steps: {duration(100 * step_s)} per 100 steps, {_to_end(tr, step_s)}"
