"""What this CPU can do, read once from /proc/cpuinfo.

The one CPU-feature probe: the compiled kernels read it (which vector width to compile for,
whether bfloat16 runs the bf16 tiles) and so does training (whether bf16 autocast pays off).
It sits below both, importing nothing from tfamily, so a kernel never imports the trainer.
"""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The instruction-set flags of the first CPU (x86 ``flags``, Arm ``Features``); empty where
    /proc/cpuinfo cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_has_bf16() -> bool:
    """True when this CPU executes bf16 dot products natively (AVX512-BF16 or AMX on x86,
    BF16 on Arm v8.6+); elsewhere PyTorch emulates bf16 matmuls, about 150x slower than fp32
    on an AVX2 EPYC."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16", "bf16"})


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model string (x86 ``model name``, else Arm's ``CPU part``/``Hardware``), or the
    platform's processor name where /proc/cpuinfo has none."""
    import platform
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("model name", "Hardware", "CPU part")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def cores() -> int:
    """The cores this process may run on (its affinity, which a container or taskset can narrow)."""
    import os
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load_average() -> float | None:
    """The one-minute load average (runnable processes), or None where the system has none."""
    import os
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
