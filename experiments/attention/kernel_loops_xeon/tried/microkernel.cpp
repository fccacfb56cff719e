#include <torch/extension.h>
#include <chrono>
#include <cstring>
#include <vector>
extern "C" {
void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
            const int*, const float*, const int*, const float*, float*, const int*);
int mkl_set_num_threads_local_(const int*);
}
template <typename T>
void mm(bool ta, bool tb, int M, int N, int K, const T* A, int lda, const T* B, int ldb, T beta, T* C, int ldc) {
  const char tA = tb ? 'T' : 'N', tB = ta ? 'T' : 'N';
  const T one = 1;
  sgemm_(&tA, &tB, &N, &M, &K, &one, B, &ldb, A, &lda, &beta, C, &ldc);
}
typedef float v16 __attribute__((vector_size(64)));
static inline v16 ld(const float* p) { v16 v; __builtin_memcpy(&v, p, 64); return v; }
static inline void st(float* p, v16 v) { __builtin_memcpy(p, &v, 64); }
// C[M x N] = beta C + A B, A element (i,k) at A[i*sai + k*sak], B rows contiguous (ldb), N % 16 == 0
template <int R, int NV>
static inline void block(int K, const float* A, int sai, int sak, const float* B, int ldb, float* C, int ldc, bool acc) {
  v16 c[R][NV];
  for (int r = 0; r < R; ++r) for (int v = 0; v < NV; ++v) c[r][v] = acc ? ld(C + r * ldc + 16 * v) : v16{};
  for (int k = 0; k < K; ++k) {
    v16 b[NV];
    for (int v = 0; v < NV; ++v) b[v] = ld(B + k * ldb + 16 * v);
    for (int r = 0; r < R; ++r) {
      const float a = A[r * sai + k * sak];
      for (int v = 0; v < NV; ++v) c[r][v] += a * b[v];
    }
  }
  for (int r = 0; r < R; ++r) for (int v = 0; v < NV; ++v) st(C + r * ldc + 16 * v, c[r][v]);
}
template <int R>
static void rows(int M0, int M1, int N, int K, const float* A, int sai, int sak, const float* B, int ldb, float* C, int ldc, bool acc) {
  for (int i = M0; i + R <= M1; i += R) {
    int j = 0;
    for (; j + 64 <= N; j += 64) block<R, 4>(K, A + i * sai, sai, sak, B + j, ldb, C + i * ldc + j, ldc, acc);
    for (; j + 16 <= N; j += 16) block<R, 1>(K, A + i * sai, sai, sak, B + j, ldb, C + i * ldc + j, ldc, acc);
  }
}
void own(int M, int N, int K, const float* A, int sai, int sak, const float* B, int ldb, float* C, int ldc, bool acc) {
  constexpr int R = 4;
  int m4 = M / R * R;
  rows<R>(0, m4, N, K, A, sai, sak, B, ldb, C, ldc, acc);
  rows<1>(m4, M, N, K, A, sai, sak, B, ldb, C, ldc, acc);
}
// time: shape kind 0 = S (32xW, K=64, B=K^T: own needs transposed copy), 1 = PV (32x64, K=W), 2 = dK (Wx64, K=32, A^T)
std::vector<double> bench(int kind, int W, int reps) {
  const int one = 1; mkl_set_num_threads_local_(&one);
  const int e = 64, Bq = 32;
  std::vector<float> q(Bq * e), k(W * e), kt(e * W), p(Bq * W), c(std::max(Bq, W) * std::max(W, e));
  for (auto& x : q) x = 0.01f * (rand() % 100); for (auto& x : k) x = 0.01f * (rand() % 100); for (auto& x : p) x = 0.01f * (rand() % 100);
  auto now = [] { return std::chrono::steady_clock::now(); };
  double t_mkl = 1e9, t_own = 1e9;
  std::vector<float> c2 = c;
  for (int round = 0; round < 5; ++round) {
    auto t0 = now();
    for (int r = 0; r < reps; ++r) {
      if (kind == 0) mm<float>(false, true, Bq, W, e, q.data(), e, k.data(), e, 0.f, c.data(), W);
      else if (kind == 1) mm<float>(false, false, Bq, e, W, p.data(), W, k.data(), e, 1.f, c.data(), e);
      else mm<float>(true, false, W, e, Bq, p.data(), W, q.data(), e, 1.f, c.data(), e);
    }
    auto t1 = now();
    for (int r = 0; r < reps; ++r) {
      if (kind == 0) {
        for (int j = 0; j < W; ++j) for (int d = 0; d < e; ++d) kt[d * W + j] = k[j * e + d];
        own(Bq, W, e, q.data(), e, 1, kt.data(), W, c2.data(), W, false);
      } else if (kind == 1) own(Bq, e, W, p.data(), W, 1, k.data(), e, c2.data(), e, true);
      else own(W, e, Bq, p.data(), 1, W, q.data(), e, c2.data(), e, true);
    }
    auto t2 = now();
    t_mkl = std::min(t_mkl, std::chrono::duration<double, std::micro>(t1 - t0).count() / reps);
    t_own = std::min(t_own, std::chrono::duration<double, std::micro>(t2 - t1).count() / reps);
  }
  // correctness (single call from zero/acc state)
  std::fill(c.begin(), c.end(), 0.f); std::fill(c2.begin(), c2.end(), 0.f);
  if (kind == 0) { mm<float>(false, true, Bq, W, e, q.data(), e, k.data(), e, 0.f, c.data(), W); own(Bq, W, e, q.data(), e, 1, kt.data(), W, c2.data(), W, false); }
  else if (kind == 1) { mm<float>(false, false, Bq, e, W, p.data(), W, k.data(), e, 1.f, c.data(), e); own(Bq, e, W, p.data(), W, 1, k.data(), e, c2.data(), e, true); }
  else { mm<float>(true, false, W, e, Bq, p.data(), W, q.data(), e, 1.f, c.data(), e); own(W, e, Bq, p.data(), 1, W, q.data(), e, c2.data(), e, true); }
  double err = 0; for (size_t i = 0; i < c.size(); ++i) err = std::max(err, (double)std::abs(c[i] - c2[i]));
  return {t_mkl, t_own, err};
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("bench", &bench); }
