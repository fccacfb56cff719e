"""Autotune: the thread count and precision a run trains in, decided in two seconds at most.

``train.threads: auto`` (the default) times one thread against all of them on the run's own
feed-forward product, (tokens x d_model) @ (d_model x d_ff), in 20 ms slots interleaved over four
rounds (about 0.2 s), and takes all where they are 1.25x faster: a busy machine can make
multi-threaded CPU training several times slower than one thread (9x at a load of 9 on 2 cores,
where timing the model itself at two threads took 20 s). ``train.precision: auto`` on a bf16-native CPU then times fp32 against bf16 on a
throwaway copy of the model, on the run's first batch at the chosen thread count, unless its
first steps predict that takes over two seconds: casts can outweigh the matmuls at small widths
(docs/results/training.md: on a Xeon, at d 128 fp32 was 1.46x bf16 before short bf16 attention
rows ran in fp32, and at d 256 bf16 is 1.8x fp32),
which is the rule where the model is too slow to time: bf16 from d_model 256 up. The product's
rate at the chosen setting, or the copy's, is also the first estimate of the step time
(``startup.py``).

The probes leave the run's RNG and data position as they were, so training is unaffected; a
resumed run takes the thread count and precision its checkpoint recorded, so it repeats the
uninterrupted run bit for bit (reductions split over threads round differently).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from .device import autocast
from .evaluate import to_device

SLOT_S = 0.02        # one timing slot of the matmul probe
GAIN = 1.25          # all threads only when they beat one by this much (load changes during a 0.2 s probe)
PROBE_S = 2.0        # the most the model probe may take (it stops once its first steps predict more)
# A training step's FLOP/s over the product's, forward and backward of a GPT at d 128 and 256 on a
# 2-core Zen 5 (fp32 0.67-0.92, bf16 0.20-0.49: the casts and the unfused parts weigh more there).
EFFICIENCY = {"fp32": 0.8, "bf16": 0.35, "fp16": 0.35}


@dataclass
class Choice:
    threads: int
    precision: str
    thread_rates: dict | None     # matmul FLOP/s per thread count
    precision_rates: dict | None  # training units/s per precision (at the chosen thread count)
    step_s: float                 # the estimated seconds of one step


def matmul_rates(counts: list[int], shape: tuple[int, int, int], device: torch.device, precision: str = "fp32",
                 slot: float = SLOT_S, rounds: int = 4) -> dict[int, float]:
    """FLOP/s of a (rows x d) @ (d x d_ff) product (``shape``) at each thread count in ``counts``,
    each timed for ``slot`` seconds per round, rounds interleaved after an untimed one."""
    rows, d, d_ff = shape
    a, b = torch.full((rows, d), 0.5, device=device), torch.full((d, d_ff), 0.25, device=device)
    done = {n: [0, 0.0] for n in counts}
    for r in range(rounds + 1):
        for n in counts:
            if device.type == "cpu":
                torch.set_num_threads(n)
            k, t0 = 0, time.perf_counter()
            while k == 0 or time.perf_counter() - t0 < slot:
                with autocast(device, precision):
                    a @ b
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                k += 1
            if r:
                done[n][0] += k
                done[n][1] += time.perf_counter() - t0
    return {n: 2.0 * rows * d * d_ff * k / s for n, (k, s) in done.items()}


def probe(make_model: Callable[[], nn.Module], batch: dict, units: int, device: torch.device,
          settings: list[tuple[int, str]], steps: int = 1, rounds: int = 2, budget_s: float | None = None) -> dict:
    """Training units/s for each (threads, precision) on ``batch`` (``units`` of work): forward and
    backward, as the optimiser's step is the same fp32 work at every setting. Empty when the steps
    so far predict the whole probe would take longer than ``budget_s``."""
    rng = torch.get_rng_state()
    model = make_model().to(device)
    batch = to_device(batch, device)
    seconds = dict.fromkeys(settings, 0.0)
    spent, done, total = 0.0, 0, len(settings) * (rounds + 1) * steps
    try:
        for r in range(rounds):
            for n, precision in settings:
                torch.set_num_threads(n)
                for timed in ([False] if r == 0 else []) + [True]:  # round 0: one untimed warm-up
                    t0 = time.perf_counter()
                    for _ in range(steps):
                        with autocast(device, precision):
                            loss, _ = model.loss(batch)
                        loss.backward()
                        model.zero_grad(set_to_none=True)
                    dt = time.perf_counter() - t0
                    spent, done = spent + dt, done + steps
                    if budget_s is not None and spent * total / done > budget_s:
                        return {}
                    if timed:
                        seconds[(n, precision)] += dt
    finally:
        torch.set_rng_state(rng)
    return {key: units * steps * rounds / sec for key, sec in seconds.items()}


def choose(precision: str, *, threads: bool, time_precision: bool, device: torch.device,
           shape: tuple[int, int, int], step_flops: float, units: int,
           measure: Callable[[list, float], dict]) -> Choice:
    """Time 1 thread against all (``threads``) and set all where they are ``GAIN`` times faster; then
    fp32 against bf16 on the model with ``measure(settings, budget_s) -> units/s``
    (``time_precision``) where that takes under ``PROBE_S``, else bf16 from d_model 256 up
    (``shape``'s d) and fp32 below. The step time is estimated from the product's rate, or the
    model's where it was timed."""
    most = torch.get_num_threads()
    counts = [1, most] if threads and most > 1 else [most]
    flops = matmul_rates(counts, shape, device)
    n = most if flops[most] >= GAIN * flops[min(counts)] else min(counts)
    if device.type == "cpu":
        torch.set_num_threads(n)
    step_s, precision_rates = step_flops / (EFFICIENCY["fp32"] * flops[n]), None
    if time_precision:  # not at all when one step is predicted to take half the probe's time
        rates = measure([(n, "fp32"), (n, "bf16")], PROBE_S) if step_s < PROBE_S / 2 else {}
        precision_rates = {p: r for (_, p), r in rates.items()} or None
        if precision_rates:
            precision = max(precision_rates, key=precision_rates.get)
            step_s = units / precision_rates[precision]
        else:
            precision = "bf16" if shape[1] >= 256 else "fp32"
    if precision != "fp32" and precision_rates is None:  # the estimate at the precision trained in
        step_s = step_flops / (EFFICIENCY[precision] * matmul_rates([n], shape, device, precision, rounds=1)[n])
    return Choice(n, precision, flops if threads and len(counts) > 1 else None, precision_rates, step_s)
