"""Autotune: the thread count and precision a run trains fastest in, timed on its own model.

``train.threads: auto`` tries one thread and all of them (a busy machine can make
multi-threaded CPU training several times slower than one thread); ``train.precision:
auto`` on a bf16-native CPU tries fp32 and bf16 (casts can outweigh the matmuls at small
widths). Each setting trains a throwaway copy of the model on the run's first batch,
the settings interleaved so a change of load hits all; the run's RNG and data position
are left as they were, so training is unaffected by the probe.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from .device import autocast
from .evaluate import to_device
from .optim import adamw


@dataclass
class Choice:
    threads: int
    precision: str
    thread_rates: dict | None     # units/s per thread count (at the chosen precision)
    precision_rates: dict | None  # units/s per precision (at the chosen thread count)


def probe(make_model: Callable[[], nn.Module], batch: dict, units: int, device: torch.device,
          settings: list[tuple[int, str]], steps: int = 1, rounds: int = 2) -> dict:
    """Training units/s for each (threads, precision) on ``batch`` (``units`` of work)."""
    rng = torch.get_rng_state()
    model = make_model().to(device)
    opt = adamw(model, 1e-9, 0.0)
    batch = to_device(batch, device)
    seconds = dict.fromkeys(settings, 0.0)
    for r in range(rounds):
        for n, precision in settings:
            torch.set_num_threads(n)
            for timed in ([False] if r == 0 else []) + [True]:  # round 0: one untimed warm-up
                t0 = time.perf_counter()
                for _ in range(steps):
                    with autocast(device, precision):
                        loss, _ = model.loss(batch)
                    loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                if timed:
                    seconds[(n, precision)] += time.perf_counter() - t0
    torch.set_rng_state(rng)
    return {key: units * steps * rounds / sec for key, sec in seconds.items()}


def choose(precision: str, *, threads: bool, time_precision: bool, measure: Callable[[list], dict]) -> Choice:
    """Time every combination asked for (``threads``: 1 and all; ``time_precision``: fp32 and
    bf16, else ``precision``) with ``measure(settings) -> rates``, set the fastest thread count,
    and return the choice. With nothing to time, nothing is measured."""
    most = torch.get_num_threads()
    counts = [1, most] if threads and most > 1 else [most]
    precisions = ["fp32", "bf16"] if time_precision else [precision]
    if len(counts) * len(precisions) == 1:
        return Choice(most, precision, {most: 0.0} if threads else None, None)
    rates = measure([(n, p) for n in counts for p in precisions])
    n, p = max(rates, key=rates.get)
    torch.set_num_threads(n)
    return Choice(n, p, {m: rates[(m, p)] for m in counts} if threads else None,
                  {q: rates[(n, q)] for q in precisions} if time_precision else None)
