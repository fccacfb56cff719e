"""bf16 tile GEMMs on one core: ATen's oneDNN brgemm (B already in VNNI layout) against MKL's
cblas_gemm_bf16bf16f32 (as csrc/common.h calls it), best of 5 rounds of 2,000 calls, alternated.
Only the speed is measured (the operands are constants). Needs a CPU where ATen runs brgemm (AMX).

    python experiments/attention/brgemm_xeon/tile_rates.py      (compiles a small extension, about a minute)
"""
import tempfile

import torch
from torch.utils.cpp_extension import load_inline

SRC = r'''
#include <torch/extension.h>
#include <ATen/native/CPUBlas.h>
#include <chrono>
extern "C" void cblas_gemm_bf16bf16f32(int, int, int, int, int, int, float, const uint16_t*, int,
                                       const uint16_t*, int, float, float*, int);
bool available() { return at::native::cpublas::could_pack(at::kBFloat16); }
double mkl(int M, int N, int K, bool tb, int reps) {
  std::vector<uint16_t> A(M * K, 0x3f00), B(K * N, 0x3e80); std::vector<float> C(M * N, 0.f);
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r)
    cblas_gemm_bf16bf16f32(101, 111, tb ? 112 : 111, M, N, K, 1.f, A.data(), K, B.data(), tb ? K : N, 0.f, C.data(), N);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}
double brgemm(int M, int N, int K, int reps) {
  std::vector<at::BFloat16> A(M * K, 0.5f), B(K * N, 0.25f); std::vector<float> C(M * N, 0.f);
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) at::native::cpublas::brgemm(M, N, K, K, N, N, false, A.data(), B.data(), C.data(), true);
  at::native::cpublas::brgemm_release(true);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}
'''


def main() -> None:
    m = load_inline("tile_rates_brgemm", SRC, functions=["available", "mkl", "brgemm"], extra_cflags=["-O3"],
                    build_directory=tempfile.mkdtemp())
    if not m.available():
        raise SystemExit("tile_rates: ATen cannot run brgemm for bf16 on this CPU (it needs AMX)")
    torch.set_num_threads(1)
    for M, N, K in [(32, 160, 64), (64, 192, 64), (32, 64, 160), (64, 64, 192), (128, 512, 64), (64, 64, 512)]:
        best = {"mkl": 9.0, "mkl_tb": 9.0, "brgemm": 9.0}
        for _ in range(5):
            best["mkl"] = min(best["mkl"], m.mkl(M, N, K, False, 2000))
            best["mkl_tb"] = min(best["mkl_tb"], m.mkl(M, N, K, True, 2000))
            best["brgemm"] = min(best["brgemm"], m.brgemm(M, N, K, 2000))
        print(f"{M}x{N}x{K}: " + "  ".join(f"{k} {2 * M * N * K / v / 1e9:.0f}" for k, v in best.items())
              + " GFLOP/s", flush=True)


if __name__ == "__main__":
    main()
