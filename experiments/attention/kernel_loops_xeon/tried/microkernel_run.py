"""Tried, not landed: a register-blocked fp32 tile product of our own (microkernel.cpp) against MKL's
sgemm called from C++ the way csrc/common.h calls it, one thread, the kernel's tile shapes.
`python microkernel_run.py` (builds microkernel.cpp with torch.utils.cpp_extension)."""
import torch
from torch.utils.cpp_extension import load
m = load("mkproto", [str(__import__("pathlib").Path(__file__).with_name("microkernel.cpp"))], extra_cflags=["-O3", "-march=native", "-mprefer-vector-width=512", "-ffp-contract=fast"], verbose=False)
for kind, name in ((0, "S=QK^T"), (1, "PV"), (2, "dK=dS^T Q")):
    for W in (32, 64, 80, 128, 160, 512):
        t_mkl, t_own, err = m.bench(kind, W, 4000)
        fl = 2 * 32 * W * 64
        print(f"{name:10s} W={W:4d} mkl {t_mkl:6.2f}us ({fl/t_mkl/1e3:5.0f} GF/s)  own {t_own:6.2f}us ({fl/t_own/1e3:5.0f} GF/s) err {err:.1e}")
