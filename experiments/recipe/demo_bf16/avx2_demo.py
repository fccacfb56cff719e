"""`tfamily demo` as on an AVX2-only CPU, emulated on an AVX512 one: oneDNN and ATen held to AVX2
and the CPU's bf16 flags hidden, so precision auto, Muon's Newton-Schulz dtype and the kernels choose
as they would there. Per-core speed is still the host's, so steps are an upper bound.

    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 python experiments/recipe/demo_bf16/avx2_demo.py --out DIR
"""
import sys

import tfamily.base.hardware as hardware

real = hardware.cpu_flags
hardware.cpu_flags = lambda: frozenset(f for f in real() if not f.startswith(("avx512", "amx")))

from tfamily.cli import main  # noqa: E402

sys.exit(main(["demo", "--sample-tokens", "0", "--json", *sys.argv[1:]]))
