// Fused sorted-chunk LSH attention for CPU: forward and backward (Kitaev et al. 2020, section 2).
//
// The same computation as chunks.py's LSHFunction, one (batch*head row, sorted chunk) tile at a
// time: the tile's queries and its window of keys are gathered by the layout's permutation into
// thread-local buffers, scored with one small GEMM, masked (window bounds, earlier rounds' windows
// for the once-per-key count of appendix A, key padding, the causal test, not self), normalised,
// and multiplied with the values, all while the tile sits in cache. PyTorch offers nothing that
// does this: its SDPA/flash kernels take dense or block masks, not per-query windows over a
// permuted order, and FlexAttention has no CPU backward in torch 2.13; doing it op by op (chunks.py)
// makes ~15 passes over every score and gathers q, k, v into sorted copies first.
//
// Rounds run one after another (each position occurs once per round, so a round's tiles never
// write the same output row); the backward recomputes scores from the saved log-sum-exp
// (FlashAttention-2) or reuses the kept probabilities, and runs tiles whose windows share key
// slots in separate phases, so their key gradients never collide.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cmath>
#include <limits>
#include <vector>

#include "common.h"

namespace {

using namespace tfamily_native;

struct Geometry {
  int64_t BH, R, Lp, e, c, cq, nt, W;  // cq query slots per tile, nt tiles per row, W window slots
  int64_t base(int64_t j) const { return (j + 1) * cq - W; }  // slot of window entry 0 (< 0: none)
};

Geometry geometry(const at::Tensor& q, const at::Tensor& perm, int64_t c, int64_t cq) {
  const int64_t Lp = q.size(1);
  // The window of tile j is the W slots ending with its own queries: the chunk before and the
  // tile (W = c + cq; the paper's chunks when cq = c), cut to the sequence.
  return Geometry{q.size(0), perm.size(1), Lp, q.size(2), c, cq, Lp / cq, std::min(c + cq, Lp)};
}


// One tile: query slots [j cq, (j+1) cq) of row g in round r, and its window of W key slots. Gathers
// the (scaled) queries and the window's keys and values by the round's permutation; with `score`
// it also forms the scores and keeps each query's allowed entries as a 0/1 row of `keep`, nonzero
// only inside [w0, w1], the query's window in this round (a contiguous range of slots, layout.py).
template <typename T>
struct Tile {
  const Geometry& G;
  std::vector<T> q, k, v, s, keep, kval;
  std::vector<int64_t> qpos, kpos;
  std::vector<int32_t> kpos32, kslot, w0, w1;  // kslot: the window keys' slots in rounds < r

  explicit Tile(const Geometry& geo)
      : G(geo), q(geo.cq * geo.e), k(geo.W * geo.e), v(geo.W * geo.e), s(geo.cq * geo.W),
        keep(geo.cq * geo.W), kval(geo.W), qpos(geo.cq), kpos(geo.W), kpos32(geo.W), kslot(geo.R * geo.W),
        w0(geo.cq), w1(geo.cq) {}

  void load(const T* Q, const T* K, const T* V, const int64_t* perm, const int32_t* slot, const int32_t* lo,
            const int32_t* hi, const uint8_t* valid, bool causal, T scale, int64_t g, int64_t r, int64_t j,
            bool score) {
    const int64_t e = G.e, cq = G.cq, W = G.W, Lp = G.Lp, base = G.base(j);
    const int64_t* pr = perm + (g * G.R + r) * Lp;
    for (int64_t i = 0; i < cq; ++i) {
      qpos[i] = pr[j * cq + i];
      const T* src = Q + (g * Lp + qpos[i]) * e;
      for (int64_t d = 0; d < e; ++d) q[i * e + d] = src[d] * scale;
    }
    for (int64_t w = 0; w < W; ++w) {
      const int64_t t = base + w;
      kpos[w] = t < 0 ? -1 : pr[t];
      kpos32[w] = static_cast<int32_t>(kpos[w]);
      T* kd = &k[w * e];
      T* vd = &v[w * e];
      if (kpos[w] < 0) {
        std::fill(kd, kd + e, T(0));
        std::fill(vd, vd + e, T(0));
        kval[w] = 0;
        continue;
      }
      kval[w] = valid[g * Lp + kpos[w]] ? T(1) : T(0);
      const T* ks = K + (g * Lp + kpos[w]) * e;
      const T* vs = V + (g * Lp + kpos[w]) * e;
      std::copy(ks, ks + e, kd);
      std::copy(vs, vs + e, vd);
      if (score)
        for (int64_t rr = 0; rr < r; ++rr) kslot[rr * W + w] = slot[(g * G.R + rr) * Lp + kpos[w]];
    }
    if (!score) return;
    mm<T>(false, true, cq, W, e, q.data(), e, k.data(), e, T(0), s.data(), W);
    std::fill(keep.begin(), keep.end(), T(0));
    for (int64_t i = 0; i < cq; ++i) {
      const int32_t p = static_cast<int32_t>(qpos[i]), self = static_cast<int32_t>(W - cq + i);
      const int64_t at = (g * G.R) * Lp + qpos[i];
      const int32_t a = static_cast<int32_t>(std::max<int64_t>(0, lo[at + r * Lp] - base));
      const int32_t b = static_cast<int32_t>(std::min<int64_t>(W - 1, hi[at + r * Lp] - base));
      w0[i] = a;
      w1[i] = b;
      T* ki = &keep[i * W];
      const T* kv = kval.data();
      const int32_t* kp = kpos32.data();
      const int32_t lim = causal ? p : std::numeric_limits<int32_t>::max();
#pragma omp simd
      for (int32_t w = a; w <= b; ++w) ki[w] = (w != self && kp[w] <= lim) ? kv[w] : T(0);
      // Appendix A, each key once: drop keys an earlier round's window already held.
      for (int64_t rr = 0; rr < r; ++rr) {
        const int32_t l2 = lo[at + rr * Lp], h2 = hi[at + rr * Lp];
        const int32_t* ks = &kslot[rr * W];
#pragma omp simd
        for (int32_t w = a; w <= b; ++w) ki[w] = (ks[w] < l2 || ks[w] > h2) ? ki[w] : T(0);
      }
    }
  }
};


struct Inputs {
  const at::Tensor &q, &k, &v, &perm, &slot, &lo, &hi, &valid;
  bool causal;
  double scale;
  double dropout;  // attention dropout on the probabilities (0: none)
  int64_t seed;    // its masks are a hash of (seed, row, round, query, key): the backward redraws them
};


// Dropout factors of one query's window: 1 / (1 - p) where kept, 0 where dropped. Counter-based,
// so forward and backward draw the same mask without storing it (as chunks.py replays its masks
// from a seed), whatever the order in which threads visit the tiles.
template <typename T>
void dropout_row(const Inputs& in, const Geometry& G, int64_t g, int64_t r, int64_t qpos, const int64_t* kpos,
                 T* z) {
  const uint64_t row = mix(static_cast<uint64_t>(in.seed) ^ mix(static_cast<uint64_t>((g * G.R + r) * G.Lp + qpos)));
  const uint64_t keep = static_cast<uint64_t>((1.0 - in.dropout) * 4294967296.0);
  const T scale = T(1) / T(1 - in.dropout);
  for (int64_t w = 0; w < G.W; ++w) z[w] = (mix(row ^ static_cast<uint64_t>(kpos[w])) >> 32) < keep ? scale : T(0);
}

template <typename T>
void forward_impl(const Inputs& in, const Geometry& G, at::Tensor& out, at::Tensor& lse, at::Tensor& probs,
                  at::Tensor& lse_rounds) {
  const T *Q = in.q.data_ptr<T>(), *K = in.k.data_ptr<T>(), *V = in.v.data_ptr<T>();
  const int64_t* P = in.perm.data_ptr<int64_t>();
  const int32_t *S = in.slot.data_ptr<int32_t>(), *LO = in.lo.data_ptr<int32_t>(), *HI = in.hi.data_ptr<int32_t>();
  const uint8_t* VA = in.valid.data_ptr<uint8_t>();
  T *O = out.data_ptr<T>(), *LSE = lse.data_ptr<T>();
  T* KEPT = probs.numel() ? probs.data_ptr<T>() : nullptr;
  T* LR = lse_rounds.numel() ? lse_rounds.data_ptr<T>() : nullptr;
  const int64_t cq = G.cq, W = G.W, e = G.e, Lp = G.Lp;
  for (int64_t r = 0; r < G.R; ++r) {
    std::atomic<int64_t> next{0};
    for_tiles(G.BH * G.nt, next, [&](auto&& claim) {
      Tile<T> tile(G);
      std::vector<T> o(cq * e), lr(cq), pz(in.dropout > 0 ? cq * W : 0);
      for (int64_t task; (task = claim()) >= 0;) {
        const int64_t g = task / G.nt, j = task % G.nt;
        tile.load(Q, K, V, P, S, LO, HI, VA, in.causal, T(in.scale), g, r, j, true);
        for (int64_t i = 0; i < cq; ++i) {
          T* si = &tile.s[i * W];
          const T* ki = &tile.keep[i * W];
          const int32_t a = tile.w0[i], b = tile.w1[i];
          T m = lowest<T>();
#pragma omp simd reduction(max : m)
          for (int32_t w = a; w <= b; ++w) m = std::max(m, ki[w] > 0 ? si[w] : lowest<T>());
          if (m == lowest<T>()) {  // nothing allowed this round: zero output, lse = lowest
            std::fill(si, si + W, T(0));
            lr[i] = lowest<T>();
            continue;
          }
          T sum = 0;
#pragma omp simd reduction(+ : sum)
          for (int32_t w = a; w <= b; ++w) {
            si[w] = exp_nonpos(si[w] - m) * ki[w];
            sum += si[w];
          }
          const T inv = T(1) / sum;
          std::fill(si, si + a, T(0));
          std::fill(si + b + 1, si + W, T(0));
#pragma omp simd
          for (int32_t w = a; w <= b; ++w) si[w] *= inv;
          lr[i] = m + std::log(sum);
        }
        if (KEPT) {
          std::copy(tile.s.begin(), tile.s.end(), KEPT + ((r * G.BH + g) * G.nt + j) * cq * W);
          for (int64_t i = 0; i < cq; ++i) LR[(r * G.BH + g) * Lp + tile.qpos[i]] = lr[i];
        }
        const T* pv = tile.s.data();
        if (in.dropout > 0) {
          for (int64_t i = 0; i < cq; ++i) {
            T* zi = &pz[i * W];
            dropout_row(in, G, g, r, tile.qpos[i], tile.kpos.data(), zi);
            for (int64_t w = 0; w < W; ++w) zi[w] *= tile.s[i * W + w];
          }
          pv = pz.data();
        }
        mm<T>(false, false, cq, e, W, pv, W, tile.v.data(), e, T(0), o.data(), e);
        for (int64_t i = 0; i < cq; ++i) {  // merge this round into (out, lse), as flash attention merges blocks
          const int64_t row = g * Lp + tile.qpos[i];
          T* dst = O + row * e;
          const T* src = &o[i * e];
          if (r == 0) {
            std::copy(src, src + e, dst);
            LSE[row] = lr[i];
            continue;
          }
          const T old = LSE[row], top = std::max(old, lr[i]);
          const T nw = top + std::log1p(std::exp(-std::abs(old - lr[i])));
          const T wa = std::exp(old - nw), wb = std::exp(lr[i] - nw);
          for (int64_t d = 0; d < e; ++d) dst[d] = dst[d] * wa + src[d] * wb;
          LSE[row] = nw;
        }
      }
    });
  }
  // Kitaev et al. 2020, section 2: a position attends to itself only when no other key was
  // allowed in any round (its lse is still the empty value); then its output is its own value.
  const T empty = lowest<T>() / 2;
  at::parallel_for(0, G.BH * Lp, 4096, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row)
      if (LSE[row] <= empty && VA[row]) std::copy(V + row * e, V + (row + 1) * e, O + row * e);
  });
}

template <typename T>
void backward_impl(const Inputs& in, const Geometry& G, const at::Tensor& lse, const at::Tensor& probs,
                   const at::Tensor& lse_rounds, const at::Tensor& dout, const at::Tensor& out, at::Tensor& delta,
                   at::Tensor& dq, at::Tensor& dk, at::Tensor& dv) {
  const T *Q = in.q.data_ptr<T>(), *K = in.k.data_ptr<T>(), *V = in.v.data_ptr<T>();
  const int64_t* P = in.perm.data_ptr<int64_t>();
  const int32_t *S = in.slot.data_ptr<int32_t>(), *LO = in.lo.data_ptr<int32_t>(), *HI = in.hi.data_ptr<int32_t>();
  const uint8_t* VA = in.valid.data_ptr<uint8_t>();
  const T *LSE = lse.data_ptr<T>(), *DO = dout.data_ptr<T>(), *OUT = out.data_ptr<T>();
  T* DL = delta.data_ptr<T>();
  const T* KEPT = probs.numel() ? probs.data_ptr<T>() : nullptr;
  const T* LR = lse_rounds.numel() ? lse_rounds.data_ptr<T>() : nullptr;
  T *DQ = dq.data_ptr<T>(), *DK = dk.data_ptr<T>(), *DV = dv.data_ptr<T>();
  const int64_t cq = G.cq, W = G.W, e = G.e, Lp = G.Lp;
  const T live = lowest<T>() / 2, scale = T(in.scale);
  at::parallel_for(0, G.BH * Lp, 1024, [&](int64_t r0, int64_t r1) {  // rowsum(dO * O): the softmax Jacobian's diagonal
    for (int64_t row = r0; row < r1; ++row) {
      T acc = 0;
      for (int64_t d = 0; d < e; ++d) acc += DO[row * e + d] * OUT[row * e + d];
      DL[row] = acc;
    }
  });
  // Tiles j and j' share window slots when |j - j'| cq < W: run them in separate phases.
  const int64_t phases = std::min(G.nt, (W + cq - 1) / cq), per_phase = (G.nt + phases - 1) / phases;
  for (int64_t r = 0; r < G.R; ++r) {
    for (int64_t ph = 0; ph < phases; ++ph) {
      std::atomic<int64_t> next{0};
      for_tiles(G.BH * per_phase, next, [&](auto&& claim) {
        Tile<T> tile(G);
        std::vector<T> dO(cq * e), dp(cq * W), gq(cq * e), gk(W * e), gv(W * e);
        std::vector<T> z(in.dropout > 0 ? cq * W : 0), pz(in.dropout > 0 ? cq * W : 0);
        for (int64_t task; (task = claim()) >= 0;) {
          const int64_t g = task / per_phase, j = (task % per_phase) * phases + ph;
          if (j >= G.nt) continue;
          tile.load(Q, K, V, P, S, LO, HI, VA, in.causal, scale, g, r, j, KEPT == nullptr);
          const T* kept = KEPT ? KEPT + ((r * G.BH + g) * G.nt + j) * cq * W : nullptr;
          for (int64_t i = 0; i < cq; ++i) {
            const int64_t row = g * Lp + tile.qpos[i];
            std::copy(DO + row * e, DO + (row + 1) * e, &dO[i * e]);
            T* si = &tile.s[i * W];
            const T l = LSE[row];
            if (kept) {  // P = p_r exp(LSE_r - LSE): the round's probabilities against all rounds
              const T f = l > live ? (G.R == 1 ? T(1) : std::exp(LR[(r * G.BH + g) * Lp + tile.qpos[i]] - l)) : T(0);
              const T* ki = kept + i * W;
#pragma omp simd
              for (int64_t w = 0; w < W; ++w) si[w] = ki[w] * f;
              continue;
            }
            const T* ki = &tile.keep[i * W];
            const int32_t a = tile.w0[i], b = l > live ? tile.w1[i] : a - 1;
            std::fill(si, si + std::max(a, 0), T(0));
            std::fill(si + std::max(b + 1, 0), si + W, T(0));
#pragma omp simd
            for (int32_t w = a; w <= b; ++w) si[w] = exp_nonpos(si[w] - l) * ki[w];
          }
          // dP = dO V^T; dS = P (dP - rowsum(dO * O)); dQ = dS K; dK = dS^T Q; dV = P^T dO
          // With dropout Z: O = (P Z) V, so dV = (P Z)^T dO and dS = P (Z dP - rowsum(dO * O)).
          const T* pv = tile.s.data();
          if (in.dropout > 0) {
            for (int64_t i = 0; i < cq; ++i) {
              dropout_row(in, G, g, r, tile.qpos[i], tile.kpos.data(), &z[i * W]);
              for (int64_t w = 0; w < W; ++w) pz[i * W + w] = z[i * W + w] * tile.s[i * W + w];
            }
            pv = pz.data();
          }
          mm<T>(false, true, cq, W, e, dO.data(), e, tile.v.data(), e, T(0), dp.data(), W);
          mm<T>(true, false, W, e, cq, pv, W, dO.data(), e, T(0), gv.data(), e);
          for (int64_t i = 0; i < cq; ++i) {
            const T d = DL[g * Lp + tile.qpos[i]];
            T* dpi = &dp[i * W];
            const T* pi = &tile.s[i * W];
            if (in.dropout > 0) {
              const T* zi = &z[i * W];
#pragma omp simd
              for (int64_t w = 0; w < W; ++w) dpi[w] = pi[w] * (zi[w] * dpi[w] - d);
              continue;
            }
#pragma omp simd
            for (int64_t w = 0; w < W; ++w) dpi[w] = pi[w] * (dpi[w] - d);
          }
          mm<T>(false, false, cq, e, W, dp.data(), W, tile.k.data(), e, T(0), gq.data(), e);
          mm<T>(true, false, W, e, cq, dp.data(), W, tile.q.data(), e, T(0), gk.data(), e);
          for (int64_t i = 0; i < cq; ++i) {
            T* dst = DQ + (g * Lp + tile.qpos[i]) * e;
            for (int64_t d = 0; d < e; ++d) dst[d] += gq[i * e + d] * scale;
          }
          for (int64_t w = 0; w < W; ++w) {
            if (tile.kpos[w] < 0) continue;
            T* dkd = DK + (g * Lp + tile.kpos[w]) * e;
            T* dvd = DV + (g * Lp + tile.kpos[w]) * e;
            for (int64_t d = 0; d < e; ++d) {
              dkd[d] += gk[w * e + d];
              dvd[d] += gv[w * e + d];
            }
          }
        }
      });
    }
  }
  at::parallel_for(0, G.BH * Lp, 4096, [&](int64_t r0, int64_t r1) {  // the rows that output their own value
    for (int64_t row = r0; row < r1; ++row)
      if (LSE[row] <= live && VA[row])
        for (int64_t d = 0; d < e; ++d) DV[row * e + d] += DO[row * e + d];
  });
}

void check(const Inputs& in, int64_t c, int64_t cq) {
  const auto &q = in.q, &k = in.k, &v = in.v, &perm = in.perm, &valid = in.valid;
  TORCH_CHECK(q.dim() == 3 && q.is_contiguous() && k.sizes() == q.sizes() && v.sizes() == q.sizes() &&
                  k.is_contiguous() && v.is_contiguous(),
              "lsh_chunks: q, k, v must be contiguous (rows, Lp, e) of one shape");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(), "lsh_chunks: one dtype");
  TORCH_CHECK(c > 0 && cq > 0 && c % cq == 0 && q.size(1) % c == 0,
              "lsh_chunks: Lp must be a multiple of the chunk length, and that of the tile");
  TORCH_CHECK(perm.scalar_type() == at::kLong && perm.is_contiguous() && perm.dim() == 3 &&
                  perm.size(0) == q.size(0) && perm.size(2) == q.size(1),
              "lsh_chunks: perm must be int64 (rows, R, Lp)");
  for (const auto* t : {&in.slot, &in.lo, &in.hi})
    TORCH_CHECK(t->scalar_type() == at::kInt && t->is_contiguous() && t->sizes() == perm.sizes(),
                "lsh_chunks: slot, lo, hi must be int32 like perm");
  TORCH_CHECK(valid.scalar_type() == at::kByte && valid.is_contiguous() && valid.dim() == 2 &&
                  valid.size(0) == q.size(0) && valid.size(1) == q.size(1),
              "lsh_chunks: valid must be uint8 (rows, Lp)");
  TORCH_CHECK(q.scalar_type() == at::kFloat || q.scalar_type() == at::kDouble, "lsh_chunks: float32 or float64 only");
  TORCH_CHECK(in.dropout >= 0 && in.dropout < 1, "lsh_chunks: dropout must be in [0, 1)");
}

std::vector<at::Tensor> lsh_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& perm, const at::Tensor& slot, const at::Tensor& lo,
                                    const at::Tensor& hi, const at::Tensor& valid, bool causal, double scale,
                                    int64_t c, int64_t cq, double dropout, int64_t seed, bool keep_probs) {
  const Inputs in{q, k, v, perm, slot, lo, hi, valid, causal, scale, dropout, seed};
  check(in, c, cq);
  const Geometry G = geometry(q, perm, c, cq);
  at::Tensor out = at::empty_like(q), lse = at::empty({G.BH, G.Lp}, q.options());
  at::Tensor probs = keep_probs ? at::empty({G.R, G.BH, G.nt, cq, G.W}, q.options()) : at::empty({0}, q.options());
  at::Tensor lse_rounds = keep_probs ? at::empty({G.R, G.BH, G.Lp}, q.options()) : at::empty({0}, q.options());
  if (q.scalar_type() == at::kFloat) {
    forward_impl<float>(in, G, out, lse, probs, lse_rounds);
  } else {
    forward_impl<double>(in, G, out, lse, probs, lse_rounds);
  }
  return {out, lse, probs, lse_rounds};
}

std::vector<at::Tensor> lsh_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& perm, const at::Tensor& slot, const at::Tensor& lo,
                                     const at::Tensor& hi, const at::Tensor& valid, bool causal, double scale,
                                     int64_t c, int64_t cq, double dropout, int64_t seed, const at::Tensor& lse,
                                     const at::Tensor& probs, const at::Tensor& lse_rounds, const at::Tensor& dout,
                                     const at::Tensor& out) {
  const Inputs in{q, k, v, perm, slot, lo, hi, valid, causal, scale, dropout, seed};
  check(in, c, cq);
  TORCH_CHECK(dout.sizes() == q.sizes() && dout.is_contiguous() && dout.scalar_type() == q.scalar_type() &&
                  out.sizes() == q.sizes() && out.is_contiguous() && out.scalar_type() == q.scalar_type(),
              "lsh_chunks: dout and out must match q");
  const Geometry G = geometry(q, perm, c, cq);
  at::Tensor dq = at::zeros_like(q), dk = at::zeros_like(q), dv = at::zeros_like(q);
  at::Tensor delta = at::empty({G.BH, G.Lp}, q.options());
  if (q.scalar_type() == at::kFloat) {
    backward_impl<float>(in, G, lse, probs, lse_rounds, dout, out, delta, dq, dk, dv);
  } else {
    backward_impl<double>(in, G, lse, probs, lse_rounds, dout, out, delta, dq, dk, dv);
  }
  return {dq, dk, dv};
}

}  // namespace

TORCH_LIBRARY(tfamily_native, m) {
  m.def("lsh_forward(Tensor q, Tensor k, Tensor v, Tensor perm, Tensor slot, Tensor lo, Tensor hi, "
        "Tensor valid, bool causal, float scale, int c, int cq, float dropout, int seed, bool keep_probs) -> Tensor[]");
  m.def("lsh_backward(Tensor q, Tensor k, Tensor v, Tensor perm, Tensor slot, Tensor lo, Tensor hi, "
        "Tensor valid, bool causal, float scale, int c, int cq, float dropout, int seed, Tensor lse, Tensor probs, "
        "Tensor lse_rounds, "
        "Tensor dout, Tensor out) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(tfamily_native, CPU, m) {
  m.impl("lsh_forward", &lsh_forward);
  m.impl("lsh_backward", &lsh_backward);
}
