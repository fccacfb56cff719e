"""GFLOP/s of the block-sparse kernel's tile GEMMs on one core: MKL's sgemm (the fp32 kernel) against
its bf16 x bf16 -> fp32 GEMM (the bf16 kernel, AMX or AVX512-BF16 where the CPU has them), called
the way csrc/common.h calls them (row-major, one thread, the library libtorch carries).

    PYTHONPATH=scripts python experiments/attention/tile_gemm_rates.py [--reps 2000] [--rounds 3]

Shapes are (M, N, K, B transposed): the forward's scores (64 x 512 x 64, B^T) and P V
(64 x 64 x 512), the backward's dK (512 x 64 x 64 with A^T), and the strided patterns' 32-row
tiles. Rounds alternate the two GEMMs; each cell is the best round. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import time
from pathlib import Path

import torch

SHAPES = [(64, 512, 64, False, True), (64, 64, 512, False, False), (512, 64, 64, True, False),
          (32, 160, 64, False, True), (128, 512, 64, False, True)]
ROW, NO, YES = 101, 111, 112


def _lib():
    lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
    missing = [f for f in ("sgemm_", "cblas_gemm_bf16bf16f32", "mkl_set_num_threads_local") if not hasattr(lib, f)]
    if missing:
        raise SystemExit(f"tile_gemm_rates: this torch build carries no MKL ({', '.join(missing)} missing); "
                         "the kernel then uses at::mm, which this script does not time")
    one = ctypes.c_int(1)
    lib.mkl_set_num_threads_local(ctypes.byref(one))
    lib.cblas_gemm_bf16bf16f32.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int,
                                                                ctypes.c_void_p, ctypes.c_int, ctypes.c_float,
                                                                ctypes.c_void_p, ctypes.c_int]
    p, i, f = ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_float)
    lib.sgemm_.argtypes = [ctypes.c_char_p, ctypes.c_char_p, i, i, i, f, p, i, p, i, f, p, i]
    return lib


def _operands(M, N, K, ta, tb, dtype):
    a = torch.randn(K, M) if ta else torch.randn(M, K)
    b = torch.randn(N, K) if tb else torch.randn(K, N)
    return a.to(dtype), b.to(dtype), torch.zeros(M, N)


def _check(c, a, b, ta, tb, tol):
    want = (a.float().t() if ta else a.float()) @ (b.float().t() if tb else b.float())
    assert torch.allclose(c, want, rtol=tol, atol=tol), float((c - want).abs().max())


def bf16_call(lib, M, N, K, ta, tb):
    a, b, c = _operands(M, N, K, ta, tb, torch.bfloat16)
    args = (ROW, YES if ta else NO, YES if tb else NO, M, N, K, 1.0, a.data_ptr(), a.shape[1], b.data_ptr(),
            b.shape[1], 0.0, c.data_ptr(), N)
    lib.cblas_gemm_bf16bf16f32(*args)
    _check(c, a, b, ta, tb, 1e-2)
    return lambda: (a, b, c, lib.cblas_gemm_bf16bf16f32(*args))  # the tensors live as long as the call


def sgemm_call(lib, M, N, K, ta, tb):
    a, b, c = _operands(M, N, K, ta, tb, torch.float32)
    # column-major C^T = op(B)^T op(A)^T, as common.h's mm
    ints = [ctypes.c_int(x) for x in (N, M, K, b.shape[1], a.shape[1], N)]
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
    args = (b"T" if tb else b"N", b"T" if ta else b"N", *map(ctypes.byref, ints[:3]), ctypes.byref(one),
            b.data_ptr(), ctypes.byref(ints[3]), a.data_ptr(), ctypes.byref(ints[4]), ctypes.byref(zero),
            c.data_ptr(), ctypes.byref(ints[5]))
    lib.sgemm_(*args)
    _check(c, a, b, ta, tb, 1e-3)
    return lambda: (a, b, c, ints, lib.sgemm_(*args))  # the tensors and ints live as long as the call


def _shape(text: str) -> tuple:
    parts = text.split(",")
    if len(parts) != 5 or not all(x.strip().isdigit() for x in parts):
        raise SystemExit(f"tile_gemm_rates: --shapes wants M,N,K,TA,TB (five integers, TA/TB 0 or 1), got {text!r}")
    M, N, K, ta, tb = map(int, parts)
    return M, N, K, bool(ta), bool(tb)


def _us(fn, reps):
    fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1e6


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--shapes", nargs="+", default=None, metavar="M,N,K,TA,TB",
                   help="GEMM shapes instead of the default ones, e.g. 64,16,64,0,1 (TA, TB: 1 = transposed)")
    args = p.parse_args()
    torch.set_num_threads(1)
    lib = _lib()
    rows = []
    shapes = SHAPES if args.shapes is None else [_shape(x) for x in args.shapes]
    for M, N, K, ta, tb in shapes:
        calls = {"fp32": sgemm_call(lib, M, N, K, ta, tb), "bf16": bf16_call(lib, M, N, K, ta, tb)}
        best = {k: float("inf") for k in calls}
        for _ in range(args.rounds):
            for k, fn in calls.items():
                best[k] = min(best[k], _us(fn, args.reps))
        flops = 2 * M * N * K
        rows.append(dict(M=M, N=N, K=K, a_transposed=ta, b_transposed=tb,
                         **{f"{k}_us": round(v, 2) for k, v in best.items()},
                         **{f"{k}_gflops": round(flops / v / 1e3, 1) for k, v in best.items()}))
    print(json.dumps(dict(cpu_capability=torch.backends.cpu.get_cpu_capability(), rows=rows), indent=1))


if __name__ == "__main__":
    main()
