"""Where a benchmark runs (``--device cpu|cuda``) and how a call's time and peak memory are
measured there, so each benchmark measures the same thing on both.

- Time: on CUDA kernels run asynchronously, so a wall clock read when the Python call returns
  would time the launches only; the device is synchronised before and after, and the time
  between two CUDA events recorded around the call is used. On the CPU, ``perf_counter``.
- Peak memory added by the call: on CUDA, ``torch.cuda.max_memory_allocated`` after
  ``reset_peak_memory_stats`` (the tensors the caching allocator handed out, not what it keeps
  reserved) minus what was allocated when the call started. On the CPU, the process's resident
  high-water mark (bench/procmem.py; exact only in a process started with its allocator
  environment).
"""
from __future__ import annotations

import time
from types import ModuleType

import torch

from . import procmem


def sync(device: torch.device) -> None:
    """Wait for ``device``'s queued kernels (a no-op on the CPU), so a clock read next sees finished work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)

DEVICES = ("cpu", "cuda")
DEVICE_HELP = ("where to run: cpu, or cuda (the first GPU; time between CUDA events, memory from "
               "torch.cuda.max_memory_allocated)")


def resolve(name: str) -> torch.device:
    """The device ``--device name`` asks for; CUDA is refused where there is none."""
    if name not in DEVICES:
        raise ValueError(f"--device {name!r} is not valid; valid: {', '.join(DEVICES)}")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device cuda: this torch ({torch.__version__}) sees no CUDA device; use --device cpu")
    return torch.device(name)


class CudaMeter:
    """Time and peak memory of calls on one CUDA device; ``cuda``: the module that measures
    (``torch.cuda``; a test passes its own to check the order of the calls)."""

    def __init__(self, device: torch.device, cuda: ModuleType | None = None):
        self.device, self.cuda = device, cuda if cuda is not None else torch.cuda

    def seconds(self, fn) -> tuple[object, float]:
        c = self.cuda
        start, end = c.Event(enable_timing=True), c.Event(enable_timing=True)
        c.synchronize(self.device)  # earlier queued work is not this call's
        start.record()
        out = fn()
        end.record()
        end.synchronize()
        return out, start.elapsed_time(end) / 1e3

    def peak_mb(self, fn) -> tuple[object, float, bool]:
        c = self.cuda
        c.synchronize(self.device)
        c.reset_peak_memory_stats(self.device)
        before = c.memory_allocated(self.device)
        out = fn()
        c.synchronize(self.device)
        return out, max(0.0, (c.max_memory_allocated(self.device) - before) / 2 ** 20), True


class CpuMeter:
    device = torch.device("cpu")

    def seconds(self, fn) -> tuple[object, float]:
        t0 = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - t0

    def peak_mb(self, fn) -> tuple[object, float, bool]:
        return procmem.peak_mb(fn)


def meter(device: torch.device) -> CudaMeter | CpuMeter:
    """The measuring methods for ``device``, chosen by its type."""
    return CudaMeter(device) if device.type == "cuda" else CpuMeter()
