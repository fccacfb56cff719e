// Shared pieces of the compiled CPU kernels (lsh_chunks.cpp, blocksparse.cpp): small GEMMs on
// one tile through the BLAS that libtorch carries, a vectorisable exp, a counter-based hash for
// dropout masks, and a dynamic tile schedule.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

// The BLAS that libtorch_cpu carries (MKL in the x86 CPU wheels): small GEMMs on one tile, called
// inside at::parallel_for. MKL must be told to run them on the calling thread: left to itself it
// tries to thread each 64 x 128 product from inside the OpenMP region and a call takes
// milliseconds instead of microseconds (measured: 14 ms vs 65 us with 2 threads). Weak symbols: a
// torch built without them keeps a correct, slower at::mm path. The thread setter is MKL's
// Fortran-style entry point (its argument by pointer).
extern "C" {
void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
            const int*, const float*, const int*, const float*, float*, const int*) __attribute__((weak));
void dgemm_(const char*, const char*, const int*, const int*, const int*, const double*, const double*,
            const int*, const double*, const int*, const double*, double*, const int*) __attribute__((weak));
int mkl_set_num_threads_local_(const int*) __attribute__((weak));
// MKL's bf16 x bf16 -> fp32 GEMM (CBLAS enums: row major 101, no transpose 111, transpose 112): it
// runs on AMX tiles or AVX512-BF16 where the CPU has them (AMX Xeon, one core, 64 x 512 x 64:
// 223 GFLOP/s against sgemm's 130; scripts/tile_gemm_rates.py).
void cblas_gemm_bf16bf16f32(int, int, int, int, int, int, float, const uint16_t*, int, const uint16_t*, int, float,
                            float*, int) __attribute__((weak));
}

namespace tfamily_native {

// Where a kernel's time goes, measured in place (the kernel_time_split op switches it on and reads
// it): per thread, the time inside its tile loop; of that, the time inside tile GEMMs; and the time
// of each named stretch of a tile's work (Laps), GEMMs excluded. Off, each GEMM and each lap mark
// costs one relaxed load. perf attributes time to functions; this attributes it to the kernel's
// own stages, which are inlined into one function.
struct TimeSplit {
  static constexpr int kSections = 14;
  static inline std::atomic<bool> on{false};
  static inline std::atomic<int64_t> busy{0}, gemm{0}, calls{0}, section[kSections] = {};
  static inline thread_local int64_t gemm_local = 0, calls_local = 0, section_local[kSections] = {};
  static bool enabled() { return on.load(std::memory_order_relaxed); }
  static int64_t now() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

struct GemmClock {  // around one tile GEMM
  const int64_t t0 = TimeSplit::enabled() ? TimeSplit::now() : -1;
  ~GemmClock() {
    if (t0 < 0) return;
    TimeSplit::gemm_local += TimeSplit::now() - t0;
    ++TimeSplit::calls_local;
  }
};

// Consecutive stretches of one thread's tile loop: mark(i) adds the time since the previous mark,
// less the GEMM time in between, to section i.
class Laps {
  int64_t last_ = -1, gemm_at_last_ = 0;

 public:
  Laps() {
    if (!TimeSplit::enabled()) return;
    last_ = TimeSplit::now();
    gemm_at_last_ = TimeSplit::gemm_local;
  }
  void mark(int section) {
    if (last_ < 0) return;
    const int64_t t = TimeSplit::now();
    TimeSplit::section_local[section] += (t - last_) - (TimeSplit::gemm_local - gemm_at_last_);
    last_ = t;
    gemm_at_last_ = TimeSplit::gemm_local;
  }
};

struct OneBlasThread {  // for the lifetime of one parallel_for body, on its thread
  int saved = 0;
  OneBlasThread() {
    const int one = 1;
    if (mkl_set_num_threads_local_) saved = mkl_set_num_threads_local_(&one);
  }
  ~OneBlasThread() {
    if (mkl_set_num_threads_local_) mkl_set_num_threads_local_(&saved);
  }
};

// Row-major C[M x N] = op(A) op(B) + beta C (op(A) is M x K; ta: A is stored K x M).
// Column-major BLAS computes C^T = op(B)^T op(A)^T, so the operands swap.
template <typename T>
void mm(bool ta, bool tb, int M, int N, int K, const T* A, int lda, const T* B, int ldb, T beta, T* C, int ldc) {
  const GemmClock clock;
  const char tA = tb ? 'T' : 'N', tB = ta ? 'T' : 'N';
  const T one = 1;
  if constexpr (std::is_same_v<T, float>) {
    if (sgemm_) return sgemm_(&tA, &tB, &N, &M, &K, &one, B, &ldb, A, &lda, &beta, C, &ldc);
  } else {
    if (dgemm_) return dgemm_(&tA, &tB, &N, &M, &K, &one, B, &ldb, A, &lda, &beta, C, &ldc);
  }
  const auto opt = at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value);
  auto a = at::from_blob(const_cast<T*>(A), {ta ? K : M, ta ? M : K}, {lda, 1}, opt);
  auto b = at::from_blob(const_cast<T*>(B), {tb ? N : K, tb ? K : N}, {ldb, 1}, opt);
  auto c = at::from_blob(C, {M, N}, {ldc, 1}, opt);
  auto prod = at::mm(ta ? a.t() : a, tb ? b.t() : b);
  if (beta == T(0)) c.copy_(prod); else c.mul_(beta).add_(prod);
}

// Row-major C[M x N] (fp32) = op(A) op(B) + beta C with bf16 operands, products and sums in fp32.
inline void mm(bool ta, bool tb, int M, int N, int K, const c10::BFloat16* A, int lda, const c10::BFloat16* B,
               int ldb, float beta, float* C, int ldc) {
  const GemmClock clock;
  if (cblas_gemm_bf16bf16f32)
    return cblas_gemm_bf16bf16f32(101, ta ? 112 : 111, tb ? 112 : 111, M, N, K, 1.0f,
                                  reinterpret_cast<const uint16_t*>(A), lda, reinterpret_cast<const uint16_t*>(B), ldb,
                                  beta, C, ldc);
  const auto opt = at::TensorOptions().dtype(at::kBFloat16);
  auto a = at::from_blob(const_cast<c10::BFloat16*>(A), {ta ? K : M, ta ? M : K}, {lda, 1}, opt).to(at::kFloat);
  auto b = at::from_blob(const_cast<c10::BFloat16*>(B), {tb ? N : K, tb ? K : N}, {ldb, 1}, opt).to(at::kFloat);
  auto c = at::from_blob(C, {M, N}, {ldc, 1}, at::TensorOptions().dtype(at::kFloat));
  auto prod = at::mm(ta ? a.t() : a, tb ? b.t() : b);
  if (beta == 0.0f) c.copy_(prod); else c.mul_(beta).add_(prod);
}

// exp(min(x, 0)) (allowed scores minus their row maximum are <= 0), vectorisable by the compiler: 2^n exp(r)
// with n = round(x / ln 2), |r| <= ln 2 / 2, and Cephes' degree-6 polynomial for exp(r) (about
// 1 ulp, as Sleef's u10 exp that torch.exp uses). x is clamped to [-127 ln 2, 0]: where n reaches
// -127 (x below about -87.7, exp(x) < 1e-38, far under fp32 resolution against the row's largest
// term, which is 1) the bits of 2^n are those of 0.0, so the result is exactly 0; masked scores
// (the lowest float) become 0 without a select.
inline float exp_nonpos(float x) {
  x = x < -88.0296f ? -88.0296f : (x > 0.0f ? 0.0f : x);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // A bit cast, not memcpy: GCC turned the memcpy's temporary into a memset that stopped the
  // loops calling this from vectorising (they ran scalar).
  const float two_n = __builtin_bit_cast(float, (static_cast<int32_t>(n) + 127) << 23);
  return p * two_n;
}

inline double exp_nonpos(double x) { return std::exp(x > 0.0 ? 0.0 : x); }

// Tiles are handed out one at a time from a shared counter instead of one fixed slice per thread:
// on a machine shared with other work a descheduled thread would otherwise hold up the whole
// region (measured: 1.2x-1.7x run-to-run spread of the 1-round call at a load of 5).
template <typename Body>
void for_tiles(int64_t n, std::atomic<int64_t>& next, const Body& body) {
  at::parallel_for(0, std::max<int64_t>(1, std::min<int64_t>(n, at::get_num_threads())), 1, [&](int64_t, int64_t) {
    OneBlasThread one_thread;
    const bool timed = TimeSplit::enabled();
    const int64_t t0 = timed ? TimeSplit::now() : 0;
    if (timed) {
      TimeSplit::gemm_local = TimeSplit::calls_local = 0;
      for (auto& x : TimeSplit::section_local) x = 0;
    }
    body([&]() -> int64_t {
      const int64_t t = next.fetch_add(1, std::memory_order_relaxed);
      return t < n ? t : -1;
    });
    if (timed) {
      TimeSplit::busy += TimeSplit::now() - t0;
      TimeSplit::gemm += TimeSplit::gemm_local;
      TimeSplit::calls += TimeSplit::calls_local;
      for (int i = 0; i < TimeSplit::kSections; ++i) TimeSplit::section[i] += TimeSplit::section_local[i];
    }
  });
}

template <typename T>
constexpr T lowest() {
  return std::numeric_limits<T>::lowest();
}

inline uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace tfamily_native
