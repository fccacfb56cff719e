"""Device and precision: which device, and whether bf16 autocast pays off there.

bf16 autocast is on by default only where the hardware has bf16 arithmetic:
CUDA GPUs that report bf16 support, and x86 CPUs with AVX512-BF16 or AMX.
Elsewhere (e.g. AVX2-only CPUs) PyTorch emulates bf16 matmuls, which measured
about 150x slower than fp32 on an AVX2 EPYC (0.9 vs 132 GFLOP/s), so "auto"
means fp32 there. Autocast keeps weights, optimiser state and the loss in fp32
(objectives compute cross-entropy in fp32), so no loss scaling is needed.

fp16 autocast is for GPUs without bf16 arithmetic (T4, V100: ``auto`` picks it there). fp16
keeps 5 exponent bits, so small gradients underflow to zero; the trainer multiplies the loss
by a scale before backward and divides the gradients by it before the step (Micikevicius et
al. 2018, "Mixed Precision Training", section 3.2), with PyTorch's ``GradScaler``: a step
whose gradients overflow is skipped and the scale halved; 2000 clean steps double it.
"""
from __future__ import annotations

import contextlib
import platform

import torch

from ..base.hardware import cpu_has_bf16


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """'auto' -> cuda:<local_rank> when CUDA is available, else cpu."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"train.device={name!r} but CUDA is not available here; valid: cpu, auto")
        return torch.device(name if ":" in name else f"cuda:{local_rank}")
    if name != "cpu":
        raise ValueError(f"train.device={name!r} is not valid; valid: auto, cpu, cuda, cuda:N")
    return torch.device("cpu")


def resolve_precision(name: str, device: torch.device) -> str:
    """'auto' -> 'bf16' where the device computes bf16 natively; on an older GPU 'fp16' (with
    loss scaling); on other CPUs 'fp32'. On a CPU the trainer then times fp32 against bf16 and
    may keep fp32 (``Trainer._autotune``); 'machine' starts from the same guess, which this machine's
    calibration then settles (``calibrate.py``)."""
    if name in ("auto", "machine"):
        if device.type == "cuda":
            # including_emulation=False: a T4 "supports" bf16 only by emulation, several times slower.
            return "bf16" if torch.cuda.is_bf16_supported(including_emulation=False) else "fp16"
        return "bf16" if cpu_has_bf16() else "fp32"
    if name not in ("bf16", "fp16", "fp32"):
        raise ValueError(f"train.precision={name!r} is not valid; valid: auto, bf16, fp16, fp32, machine")
    return name


_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(device: torch.device, precision: str):
    """The forward-pass context for ``precision`` ('bf16' or 'fp16' autocast, or plain fp32)."""
    if precision in _AUTOCAST:
        return torch.autocast(device.type, dtype=_AUTOCAST[precision])
    return contextlib.nullcontext()


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler:
    """Loss scaling for fp16 (see the module docstring); a pass-through for other precisions."""
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")


def describe(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    n = torch.get_num_threads()
    return f"{platform.processor() or platform.machine()} ({n} thread{'s' * (n > 1)}, " \
           f"{torch.backends.cpu.get_cpu_capability()}, bf16 {'native' if cpu_has_bf16() else 'emulated'})"
