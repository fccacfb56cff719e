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
