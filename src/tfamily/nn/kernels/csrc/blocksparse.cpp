// Fused block-sparse attention for CPU: forward and backward over a pattern's block plan
// (nn/kernels/layout.py), one (batch, head, query tile) at a time.
//
// The plan lists, per query tile, the key tiles it visits and, for tiles only partly allowed, a
// B x B mask. The forward reads each query tile, and each listed key and value tile, in place
// (row pointers into the caller's tensors, any batch/head/row strides; rows are copied into a
// thread-local buffer only when the plan permutes positions), scores them with one small GEMM,
// masks them, and folds them into an online softmax (FlashAttention-2): no gathered copies of
// K/V, no zero-filled tiles, no L x L tensor. It returns the log-sum-exp too, so a union whose
// parts need different orders is merged by the caller. The backward recomputes every tile's
// probabilities from the saved log-sum-exp; one task owns a (batch, kv head) and all its query
// heads, so key and value gradients accumulate without races (grouped-query heads read their
// shared K/V without copies), and when there are fewer (batch, kv head) pairs than threads the
// query tiles are split into chunks with private key/value gradients, summed at the end.
//
// Nothing in PyTorch does this on CPU: SDPA takes a dense mask, FlexAttention has no CPU
// backward in torch 2.13, and SDPA on gathered tiles (blocksparse.py) spends 40-60% of its time
// gathering and scattering tiles.
#include <torch/library.h>

#include <vector>

#include "common.h"

namespace {

using namespace tfamily_native;

// Inputs are read in T; scores, softmax statistics, outputs before rounding and gradients are
// kept in Acc<T>: T itself for float and double, float for bf16 (whose tile GEMMs are bf16 x bf16
// -> fp32, common.h).
template <typename T>
struct AccOf {
  using type = T;
};
template <>
struct AccOf<c10::BFloat16> {
  using type = float;
};
template <typename T>
using Acc = typename AccOf<T>::type;

// src (n values in Acc<T>) as a GEMM operand in T: src itself when the types agree, else rounded
// into dst. fp32 -> bf16 rounds to nearest even on the bits, as c10::BFloat16 does, but without
// its NaN branch, so the loop is branch-free integer ops; the values here (probabilities, their
// gradients, accumulated dK/dV) are finite.
inline void round_bf16(const float* src, c10::BFloat16* dst, int64_t n) {
  auto* out = reinterpret_cast<uint16_t*>(dst);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = __builtin_bit_cast(uint32_t, src[i]);
    out[i] = static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
  }
}

template <typename T>
const T* narrow(const Acc<T>* src, std::vector<T>& dst, int64_t n) {
  if constexpr (std::is_same_v<T, Acc<T>>) {
    return src;
  } else {
    round_bf16(src, dst.data(), n);
    return dst.data();
  }
}

// A (b, h, n, x) tensor read in place: any strides, last dimension contiguous.
template <typename T>
struct View {
  T* p;
  int64_t sb, sh, sn;
  explicit View(const at::Tensor& t)
      : p(const_cast<T*>(t.data_ptr<T>())), sb(t.stride(0)), sh(t.stride(1)), sn(t.stride(2)) {}
  T* row(int64_t b, int64_t h, int64_t i) const { return p + b * sb + h * sh + i * sn; }
};

struct Plan {
  int64_t B, nqt, n, m, b, h, hk, e;
  bool per_head, q_ident, k_ident;
  const int64_t *q_index, *k_index, *row_ptr;
  const uint8_t *q_valid, *masks, *kp;  // kp: (b, m) key padding, or null
  const int32_t *cols, *mids, *widths;  // widths: keys used from the tile's start (B, or fewer when
                                         // the plan allows no later column of the tile to any query)
  double scale, dropout;
  int64_t seed;
  int64_t layout_row(int64_t head, int64_t qt) const { return (per_head ? head : 0) * nqt + qt; }
  // The end of the group of plan entries that starts at x0 (row r): at most `group` tiles. With
  // keys in natural order a group is a run of consecutive tiles (read in place as one block,
  // all but its last tile at full width), so a narrow or distant tile (longformer's global
  // columns) is its own small product instead of forcing the whole group through copies.
  int64_t group_end(int64_t r, int64_t x0, int64_t group) const {
    const int64_t end = std::min(row_ptr[r + 1], x0 + group);
    if (!k_ident) return end;
    int64_t x1 = x0 + 1;
    while (x1 < end && cols[x1] == cols[x1 - 1] + 1 && widths[x1 - 1] == B) ++x1;
    return x1;
  }
};

// The work of one query tile against one group of its plan row's key tiles (up to `G` tiles, W =
// tiles x B keys): scored by one GEMM (B x W) instead of one per tile, so the BLAS sees wider
// products; a group of consecutive tiles in natural key order is read in place as one block.
template <typename T>
struct Tile {
  using A = Acc<T>;
  const Plan& P;
  int64_t G, W = 0;
  bool in_place = false;               // the group's keys are rows of K and V (else copied to k, v)
  std::vector<T> q, k, v, p;           // p: probabilities (or their gradients) rounded to T for a GEMM
  std::vector<A> s;
  std::vector<int64_t> qn, kn;         // natural positions (qn: -1 for padding slots)

  Tile(const Plan& plan, int64_t group)
      : P(plan), G(group), q(plan.B * plan.e), k(group * plan.B * plan.e), v(group * plan.B * plan.e),
        p(std::is_same_v<T, A> ? 0 : plan.B * group * plan.B), s(plan.B * group * plan.B), qn(plan.B),
        kn(group * plan.B) {}

  void load_queries(const View<T>& Q, int64_t b, int64_t h, int64_t qt) {
    const int64_t B = P.B, e = P.e;
    const A scale = A(P.scale);
    for (int64_t i = 0; i < B; ++i) {
      const int64_t slot = qt * B + i;
      const bool valid = P.q_ident ? slot < P.n : P.q_valid[slot] != 0;
      qn[i] = valid ? (P.q_ident ? slot : P.q_index[slot]) : -1;
      T* dst = &q[i * e];
      if (qn[i] < 0) {
        std::fill(dst, dst + e, T(0));
        continue;
      }
      const T* src = Q.row(b, h, qn[i]);
      for (int64_t d = 0; d < e; ++d) dst[d] = T(A(src[d]) * scale);
    }
  }

  // Entries [x0, x1) of a plan row: their keys and values, as pointers into K and V (row strides
  // ldk, ldv) when they are consecutive tiles in natural order, else rows copied into k and v.
  void load_keys(const View<T>& K, const View<T>& V, int64_t b, int64_t hk, int64_t x0, int64_t x1, const T** kp,
                 const T** vp, int64_t* ldk, int64_t* ldv) {
    const int64_t B = P.B, e = P.e, t0 = P.cols[x0];
    W = 0;
    for (int64_t x = x0; x < x1; ++x) W += P.widths[x];
    in_place = P.k_ident;
    for (int64_t x = x0; x < x1 && in_place; ++x)
      in_place = P.cols[x] == t0 + (x - x0) && (x == x1 - 1 || P.widths[x] == B);
    if (in_place) {
      for (int64_t j = 0; j < W; ++j) kn[j] = t0 * B + j;
      *kp = K.row(b, hk, t0 * B);
      *vp = V.row(b, hk, t0 * B);
      *ldk = K.sn;
      *ldv = V.sn;
      return;
    }
    for (int64_t x = x0, u = 0; x < x1; u += P.widths[x], ++x) {
      const int64_t t = P.cols[x];
      for (int64_t j = 0; j < P.widths[x]; ++j) {
        const int64_t w = u + j;
        kn[w] = P.k_ident ? t * B + j : P.k_index[t * B + j];
        const T* ks = K.row(b, hk, kn[w]);
        const T* vs = V.row(b, hk, kn[w]);
        std::copy(ks, ks + e, &k[w * e]);
        std::copy(vs, vs + e, &v[w * e]);
      }
    }
    *kp = k.data();
    *vp = v.data();
    *ldk = *ldv = e;
  }

  // The scores (B x W, after the bias) that the group's partial tiles or the key padding forbid,
  // set to the lowest value in place; exp_nonpos maps them to exactly 0. Tiles allowed everywhere
  // are not touched. (A keep-mask buffer of ones and zeros, filled for every tile and multiplied
  // in by the softmax loops, cost more: its u8 -> float fill did not vectorise;
  // experiments/attention/kernel_loops_xeon.)
  void mask_scores(int64_t b, int64_t x0, int64_t x1) {
    const int64_t B = P.B;
    const A low = lowest<A>();
    for (int64_t x = x0, u = 0; x < x1; u += P.widths[x], ++x) {
      if (P.mids[x] < 0) continue;
      const uint8_t* mk = P.masks + static_cast<int64_t>(P.mids[x]) * B * B;
      const int64_t wx = P.widths[x];
      for (int64_t i = 0; i < B; ++i) {
        A* si = &s[i * W + u];
        const uint8_t* mi = mk + i * B;
#pragma omp simd
        for (int64_t j = 0; j < wx; ++j) si[j] = mi[j] ? si[j] : low;
      }
    }
    if (!P.kp) return;
    const uint8_t* kpb = P.kp + b * P.m;
    for (int64_t w = 0; w < W; ++w)
      if (!kpb[kn[w]])
        for (int64_t i = 0; i < B; ++i) s[i * W + w] = low;
  }

  // s = q k^T (+ the bias at the natural positions).
  void score(const T* kp, int64_t ld, const at::Tensor* bias, int64_t b, int64_t h) {
    const int64_t B = P.B, e = P.e;
    mm(false, true, B, W, e, q.data(), e, kp, ld, A(0), s.data(), W);
    if (!bias) return;
    const A* bp = bias->data_ptr<A>();
    const int64_t sb = bias->stride(0), sh = bias->stride(1), sn = bias->stride(2), sm = bias->stride(3);
    for (int64_t i = 0; i < B; ++i) {
      if (qn[i] < 0) continue;
      const A* bi = bp + b * sb + h * sh + qn[i] * sn;
      for (int64_t w = 0; w < W; ++w) s[i * W + w] += bi[kn[w] * sm];
    }
  }

  // Attention dropout factors of query i against the group: 1 / (1 - p) kept, 0 dropped; a hash of
  // (seed, batch, head, query, key), so the backward redraws the forward's mask.
  void dropout_row(int64_t b, int64_t h, int64_t i, A* z) const {
    if (qn[i] < 0) {
      std::fill(z, z + W, A(0));
      return;
    }
    const uint64_t row = mix(static_cast<uint64_t>(P.seed) ^ mix(static_cast<uint64_t>((b * P.h + h) * P.n + qn[i])));
    const uint64_t keepbits = static_cast<uint64_t>((1.0 - P.dropout) * 4294967296.0);
    const A f = A(1) / A(1 - P.dropout);
    for (int64_t w = 0; w < W; ++w) z[w] = (mix(row ^ static_cast<uint64_t>(kn[w])) >> 32) < keepbits ? f : A(0);
  }
};

// The stretches of a tile's work that kernel_time_split reports (TimeSplit, common.h), GEMMs
// excluded; scripts/kernel_time_split.py names them in this order.
enum Section : int {
  kFwdLoadQ, kFwdLoadKV, kFwdMask, kFwdSoftmax, kFwdRound, kFwdWrite,
  kBwdSlabs, kBwdLoad, kBwdLoadKV, kBwdMask, kBwdExp, kBwdGrads, kBwdScatter, kBwdWriteDQ
};
static_assert(kBwdWriteDQ + 1 == TimeSplit::kSections);

template <typename T>
void forward_impl(const Plan& P, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor* bias,
                  at::Tensor& out, at::Tensor& lse, int64_t group, bool merge) {
  using A = Acc<T>;
  const View<T> Q(q), K(k), V(v), O(out);
  A* LSE = lse.data_ptr<A>();
  const int64_t B = P.B, e = P.e, g = P.h / P.hk;
  std::atomic<int64_t> next{0};
  for_tiles(P.b * P.h * P.nqt, next, [&](auto&& claim) {
    Tile<T> tile(P, group);
    std::vector<A> acc(B * e), mx(B), l(B), z(group * B);
    Laps laps;
    for (int64_t task; (task = claim()) >= 0;) {
      const int64_t qt = task % P.nqt, h = (task / P.nqt) % P.h, b = task / (P.nqt * P.h);
      const int64_t r = P.layout_row(h, qt);
      tile.load_queries(Q, b, h, qt);
      std::fill(acc.begin(), acc.end(), A(0));
      std::fill(mx.begin(), mx.end(), lowest<A>());
      std::fill(l.begin(), l.end(), A(0));
      laps.mark(kFwdLoadQ);
      for (int64_t x0 = P.row_ptr[r], x1; x0 < P.row_ptr[r + 1]; x0 = x1) {
        x1 = P.group_end(r, x0, group);
        const T *kp, *vp;
        int64_t ldk, ldv;
        tile.load_keys(K, V, b, h / g, x0, x1, &kp, &vp, &ldk, &ldv);
        laps.mark(kFwdLoadKV);
        const int64_t W = tile.W;
        tile.score(kp, ldk, bias, b, h);
        tile.mask_scores(b, x0, x1);
        laps.mark(kFwdMask);
        for (int64_t i = 0; i < B; ++i) {  // online softmax (FlashAttention-2) across groups
          A* si = &tile.s[i * W];
          A m = lowest<A>();
          // A select, not std::max: GCC left `m = std::max(m, si[w])` scalar under this pragma.
#pragma omp simd reduction(max : m)
          for (int64_t w = 0; w < W; ++w) m = si[w] > m ? si[w] : m;
          if (m == lowest<A>()) {  // no allowed key for this query in this group
            std::fill(si, si + W, A(0));
            continue;
          }
          const A top = std::max(mx[i], m);
          const A alpha = mx[i] == lowest<A>() ? A(0) : std::exp(mx[i] - top);
          A sum = 0;
#pragma omp simd reduction(+ : sum)
          for (int64_t w = 0; w < W; ++w) {
            si[w] = exp_nonpos(si[w] - top);
            sum += si[w];
          }
          l[i] = l[i] * alpha + sum;
          mx[i] = top;
          if (alpha != A(1)) {
            A* ai = &acc[i * e];
            for (int64_t d = 0; d < e; ++d) ai[d] *= alpha;
          }
          if (P.dropout > 0) {
            tile.dropout_row(b, h, i, z.data());
            for (int64_t w = 0; w < W; ++w) si[w] *= z[w];
          }
        }
        laps.mark(kFwdSoftmax);
        mm(false, false, B, e, W, narrow<T>(tile.s.data(), tile.p, B * W), W, vp, ldv, A(1), acc.data(), e);
        laps.mark(kFwdRound);
      }
      for (int64_t i = 0; i < B; ++i) {
        if (tile.qn[i] < 0) continue;
        T* dst = O.row(b, h, tile.qn[i]);
        A* lrow = LSE + (b * P.h + h) * P.n + tile.qn[i];
        if (l[i] == A(0)) {  // the query sees no key: zero output, lse = lowest (merging: keep them)
          if (!merge) {
            std::fill(dst, dst + e, T(0));
            *lrow = lowest<A>();
          }
          continue;
        }
        const A mine = mx[i] + std::log(l[i]);
        if (merge && *lrow > lowest<A>() / 2) {
          // A union's softmax from two groups' (out, lse): out = w_prev out_prev + w_mine out_mine,
          // w = exp(lse_g - lse), lse = log(exp(lse_prev) + exp(lse_mine)).
          const A prev = *lrow, top = std::max(prev, mine);
          const A wp = std::exp(prev - top), wm = std::exp(mine - top), total = wp + wm;
          const A a = wp / total, c = wm / (total * l[i]);
          for (int64_t d = 0; d < e; ++d) dst[d] = T(A(dst[d]) * a + acc[i * e + d] * c);
          *lrow = top + std::log(total);
          continue;
        }
        const A inv = A(1) / l[i];
        for (int64_t d = 0; d < e; ++d) dst[d] = T(acc[i * e + d] * inv);
        *lrow = mine;
      }
      laps.mark(kFwdWrite);
    }
  });
}

// G: the dtype of dq and of the returned dK, dV: A, or T for bf16 inputs whose gradients are
// rounded here. dk_out, dv_out (b, hk, m, e, any batch/head/row strides), given only with one
// chunk: with G == A each task accumulates straight into its rows of them; with bf16 it
// accumulates in its fp32 slab and rounds that into them while it is still warm. Without them
// (or with several chunks) the slabs are returned and the caller sums the chunks.
template <typename T, typename G>
void backward_impl(const Plan& P, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor* bias,
                   const at::Tensor& lse, const at::Tensor& delta, const at::Tensor& dout, at::Tensor& dq,
                   at::Tensor& dk, at::Tensor& dv, at::Tensor* dk_out, at::Tensor* dv_out, at::Tensor* dbias,
                   int64_t chunks, int64_t group, bool accumulate) {
  using A = Acc<T>;
  const View<T> Q(q), K(k), V(v), DO(dout);
  const View<G> DQ(dq);
  const A *LSE = lse.data_ptr<A>(), *DL = delta.data_ptr<A>();
  A *DK = dk.data_ptr<A>(), *DV = dv.data_ptr<A>();  // (chunks, b, hk, m, e), contiguous
  A* DB = dbias ? dbias->data_ptr<A>() : nullptr;     // (b, h, n, m), contiguous
  const int64_t B = P.B, e = P.e, g = P.h / P.hk, per_chunk = (P.nqt + chunks - 1) / chunks, GB = group * B;
  const A dead = lowest<A>() / 2, scale = A(P.scale);
  std::atomic<int64_t> next{0};
  for_tiles(P.b * P.hk * chunks, next, [&](auto&& claim) {
    Tile<T> tile(P, group);
    std::vector<T> dO(B * e), ds(std::is_same_v<T, A> ? 0 : B * GB);  // ds: dS rounded to T for its GEMMs
    std::vector<A> dp(B * GB), gq(B * e), gk(GB * e), gv(GB * e), l(B), d(B);
    std::vector<A> z(P.dropout > 0 ? B * GB : 0), pz(P.dropout > 0 ? B * GB : 0);
    Laps laps;
    for (int64_t task; (task = claim()) >= 0;) {
      const int64_t c = task % chunks, hk = (task / chunks) % P.hk, b = task / (chunks * P.hk);
      // This task's dK, dV rows: the caller's views when it accumulates straight into them (row
      // strides lk, lv), else its own slab of DK, DV.
      const bool direct = std::is_same_v<G, A> && dk_out != nullptr;
      A* dkb = direct ? dk_out->data_ptr<A>() + b * dk_out->stride(0) + hk * dk_out->stride(1)
                      : DK + ((c * P.b + b) * P.hk + hk) * P.m * e;
      A* dvb = direct ? dv_out->data_ptr<A>() + b * dv_out->stride(0) + hk * dv_out->stride(1)
                      : DV + ((c * P.b + b) * P.hk + hk) * P.m * e;
      const int64_t lk = direct ? dk_out->stride(2) : e, lv = direct ? dv_out->stride(2) : e;
      // This task's slabs are zeroed here, on its own thread, right before it accumulates into them
      // (one zero-fill pass per thread, in cache, instead of a serial at::zeros over cold pages);
      // not when it adds to the caller's gradients of another group of the same union.
      for (int64_t r = 0; r < P.m && !(direct && accumulate); ++r) {
        std::fill(dkb + r * lk, dkb + r * lk + e, A(0));
        std::fill(dvb + r * lv, dvb + r * lv + e, A(0));
      }
      laps.mark(kBwdSlabs);
      for (int64_t h = hk * g; h < (hk + 1) * g; ++h) {
        for (int64_t qt = c * per_chunk; qt < std::min(P.nqt, (c + 1) * per_chunk); ++qt) {
          const int64_t r = P.layout_row(h, qt);
          tile.load_queries(Q, b, h, qt);
          if (P.row_ptr[r] == P.row_ptr[r + 1]) {  // queries that see no key: zero gradient
            for (int64_t i = 0; i < B && !accumulate; ++i)
              if (tile.qn[i] >= 0) std::fill(DQ.row(b, h, tile.qn[i]), DQ.row(b, h, tile.qn[i]) + e, G(0));
            continue;
          }
          for (int64_t i = 0; i < B; ++i) {
            const int64_t qi = tile.qn[i];
            if (qi < 0) {
              std::fill(&dO[i * e], &dO[(i + 1) * e], T(0));
              l[i] = lowest<A>();
              d[i] = 0;
              continue;
            }
            const T* src = DO.row(b, h, qi);
            std::copy(src, src + e, &dO[i * e]);
            l[i] = LSE[(b * P.h + h) * P.n + qi];
            d[i] = DL[(b * P.h + h) * P.n + qi];
          }
          std::fill(gq.begin(), gq.end(), A(0));
          laps.mark(kBwdLoad);
          for (int64_t x0 = P.row_ptr[r], x1; x0 < P.row_ptr[r + 1]; x0 = x1) {
            x1 = P.group_end(r, x0, group);
            const T *kp, *vp;
            int64_t ldk, ldv;
            tile.load_keys(K, V, b, hk, x0, x1, &kp, &vp, &ldk, &ldv);
            laps.mark(kBwdLoadKV);
            const int64_t W = tile.W;
            tile.score(kp, ldk, bias, b, h);
            tile.mask_scores(b, x0, x1);
            laps.mark(kBwdMask);
            for (int64_t i = 0; i < B; ++i) {  // P = exp(s - lse) where allowed
              A* si = &tile.s[i * W];
              const A li = l[i];
              if (li <= dead) {
                std::fill(si, si + W, A(0));
                continue;
              }
#pragma omp simd
              for (int64_t w = 0; w < W; ++w) si[w] = exp_nonpos(si[w] - li);
            }
            // dP = dO V^T; dS = P (dP - D); dQ += dS K; dK += dS^T Q; dV += P^T dO
            // With dropout Z: O = (P Z) V, so dV += (P Z)^T dO and dS = P (Z dP - D).
            const A* pv = tile.s.data();
            if (P.dropout > 0) {
              for (int64_t i = 0; i < B; ++i) {
                tile.dropout_row(b, h, i, &z[i * W]);
                for (int64_t w = 0; w < W; ++w) pz[i * W + w] = z[i * W + w] * tile.s[i * W + w];
              }
              pv = pz.data();
            }
            laps.mark(kBwdExp);
            mm(false, true, B, W, e, dO.data(), e, vp, ldv, A(0), dp.data(), W);
            for (int64_t i = 0; i < B; ++i) {
              A* dpi = &dp[i * W];
              const A* pi = &tile.s[i * W];
              const A di = d[i];
              if (P.dropout > 0) {
                const A* zi = &z[i * W];
#pragma omp simd
                for (int64_t w = 0; w < W; ++w) dpi[w] = pi[w] * (zi[w] * dpi[w] - di);
              } else {
#pragma omp simd
                for (int64_t w = 0; w < W; ++w) dpi[w] = pi[w] * (dpi[w] - di);
              }
            }
            if (DB) {  // d bias = dS at the natural positions (each visited once per (b, h))
              for (int64_t i = 0; i < B; ++i) {
                if (tile.qn[i] < 0) continue;
                A* dbi = DB + ((b * P.h + h) * P.n + tile.qn[i]) * P.m;
                // Forbidden keys add dS = P (dP - D) = 0 (P is exactly 0 there).
                for (int64_t w = 0; w < W; ++w) dbi[tile.kn[w]] += dp[i * W + w];
              }
            }
            const T* dsT = narrow<T>(dp.data(), ds, B * W);
            const T* pvT = narrow<T>(pv, tile.p, B * W);
            mm(false, false, B, e, W, dsT, W, kp, ldk, A(1), gq.data(), e);
            laps.mark(kBwdGrads);
            if (tile.in_place) {  // consecutive natural rows: accumulate straight into this task's dK, dV
              const int64_t row0 = tile.kn[0];
              mm(true, false, W, e, B, dsT, W, tile.q.data(), e, A(1), dkb + row0 * lk, lk);
              mm(true, false, W, e, B, pvT, W, dO.data(), e, A(1), dvb + row0 * lv, lv);
            } else {
              mm(true, false, W, e, B, dsT, W, tile.q.data(), e, A(0), gk.data(), e);
              mm(true, false, W, e, B, pvT, W, dO.data(), e, A(0), gv.data(), e);
              for (int64_t w = 0; w < W; ++w) {
                A* dkr = dkb + tile.kn[w] * lk;
                A* dvr = dvb + tile.kn[w] * lv;
                for (int64_t dd = 0; dd < e; ++dd) {
                  dkr[dd] += gk[w * e + dd];
                  dvr[dd] += gv[w * e + dd];
                }
              }
            }
            laps.mark(kBwdScatter);
          }
          for (int64_t i = 0; i < B; ++i) {
            if (tile.qn[i] < 0) continue;
            G* dst = DQ.row(b, h, tile.qn[i]);
            if (accumulate) {  // G == A here (checked by the caller)
              for (int64_t dd = 0; dd < e; ++dd) dst[dd] += G(gq[i * e + dd] * scale);
            } else {
              for (int64_t dd = 0; dd < e; ++dd) dst[dd] = G(gq[i * e + dd] * scale);
            }
          }
          laps.mark(kBwdWriteDQ);
        }
      }
      if constexpr (!std::is_same_v<G, A>) {
        if (dk_out) {
          const View<G> DKO(*dk_out), DVO(*dv_out);
          for (int64_t r = 0; r < P.m; ++r) {
            round_bf16(dkb + r * e, DKO.row(b, hk, r), e);
            round_bf16(dvb + r * e, DVO.row(b, hk, r), e);
          }
        }
      }
      laps.mark(kBwdSlabs);
    }
  });
}

Plan make_plan(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& q_index,
               const at::Tensor& q_valid, const at::Tensor& k_index, const at::Tensor& row_ptr, const at::Tensor& cols,
               const at::Tensor& mids, const at::Tensor& widths, const at::Tensor& masks, const at::Tensor& key_padding,
               int64_t block,
               bool per_head, bool q_ident, bool k_ident, double scale, double dropout, int64_t seed) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.sizes() == k.sizes(), "blocksparse: q (b, h, n, e), k and v (b, hk, m, e)");
  TORCH_CHECK(q.size(0) == k.size(0) && q.size(3) == k.size(3) && q.size(1) % k.size(1) == 0,
              "blocksparse: batch, head dim and grouped heads must agree");
  TORCH_CHECK(q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1, "blocksparse: the head dim must be contiguous");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type() &&
                  (q.scalar_type() == at::kFloat || q.scalar_type() == at::kDouble ||
                   q.scalar_type() == at::kBFloat16),
              "blocksparse: q, k, v of one dtype, float32, float64 or bfloat16");
  TORCH_CHECK(q_index.scalar_type() == at::kLong && k_index.scalar_type() == at::kLong &&
                  row_ptr.scalar_type() == at::kLong && q_valid.scalar_type() == at::kByte &&
                  cols.scalar_type() == at::kInt && mids.scalar_type() == at::kInt && widths.scalar_type() == at::kInt &&
                  masks.scalar_type() == at::kByte,
              "blocksparse: plan tensors of the wrong dtype");
  for (const auto* t : {&q_index, &q_valid, &k_index, &row_ptr, &cols, &mids, &widths, &masks})
    TORCH_CHECK(t->is_contiguous(), "blocksparse: plan tensors must be contiguous");
  TORCH_CHECK(dropout >= 0 && dropout < 1, "blocksparse: dropout must be in [0, 1)");
  TORCH_CHECK(block >= 1, "blocksparse: block must be positive");
  const int64_t nqt = q_index.numel() / block;
  TORCH_CHECK(nqt * block == q_index.numel() && q_index.numel() >= q.size(2), "blocksparse: q_index must cover whole tiles");
  TORCH_CHECK(row_ptr.numel() == (per_head ? q.size(1) : 1) * nqt + 1, "blocksparse: row_ptr has the wrong length");
  TORCH_CHECK(!k_ident || k.size(2) % block == 0, "blocksparse: a natural-order key axis must be whole tiles");
  const bool kp = key_padding.numel() > 0;
  TORCH_CHECK(!kp || (key_padding.scalar_type() == at::kByte && key_padding.is_contiguous() &&
                      key_padding.size(0) == q.size(0) && key_padding.size(1) == k.size(2)),
              "blocksparse: key_padding must be uint8 (b, m)");
  return Plan{block, nqt, q.size(2), k.size(2), q.size(0), q.size(1), k.size(1), q.size(3), per_head, q_ident, k_ident,
              q_index.data_ptr<int64_t>(), k_index.data_ptr<int64_t>(), row_ptr.data_ptr<int64_t>(),
              q_valid.data_ptr<uint8_t>(), masks.data_ptr<uint8_t>(), kp ? key_padding.data_ptr<uint8_t>() : nullptr,
              cols.data_ptr<int32_t>(), mids.data_ptr<int32_t>(), widths.data_ptr<int32_t>(), scale, dropout, seed};
}

// The dtype of the softmax statistics, the bias and the gradients: float for bf16 inputs.
at::ScalarType acc_type(const at::Tensor& q) {
  return q.scalar_type() == at::kBFloat16 ? at::kFloat : q.scalar_type();
}

const at::Tensor* checked_bias(const at::Tensor& bias, const at::Tensor& q, int64_t m) {
  if (bias.numel() == 0) return nullptr;
  TORCH_CHECK(bias.dim() == 4 && bias.size(0) == q.size(0) && bias.size(1) == q.size(1) && bias.size(2) == q.size(2) &&
                  bias.size(3) == m && bias.scalar_type() == acc_type(q),
              "blocksparse: bias must be expanded to (b, h, n, m), float32 for bfloat16 q, else q's dtype");
  return &bias;
}

std::vector<at::Tensor> blocksparse_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const at::Tensor& q_index, const at::Tensor& q_valid,
                                            const at::Tensor& k_index, const at::Tensor& row_ptr,
                                            const at::Tensor& cols, const at::Tensor& mids, const at::Tensor& widths,
                                            const at::Tensor& masks,
                                            const at::Tensor& key_padding, const at::Tensor& bias, int64_t block,
                                            bool per_head, bool q_ident, bool k_ident, double scale, double dropout,
                                            int64_t seed, int64_t group, const at::Tensor& out_buf,
                                            const at::Tensor& lse_buf) {
  const Plan P = make_plan(q, k, v, q_index, q_valid, k_index, row_ptr, cols, mids, widths, masks, key_padding, block, per_head,
                           q_ident, k_ident, scale, dropout, seed);
  const at::Tensor* bp = checked_bias(bias, q, P.m);
  TORCH_CHECK(group >= 1, "blocksparse: group must be positive");
  // out_buf: write into the caller's (b, h, n, e) view (e.g. one head group of a larger output)
  at::Tensor out = out_buf.numel() ? out_buf : at::empty({P.b, P.h, P.n, P.e}, q.options());
  TORCH_CHECK(out.sizes() == q.sizes() && out.stride(3) == 1 && out.scalar_type() == q.scalar_type(),
              "blocksparse: out_buf must be (b, h, n, e) in q's dtype with a contiguous last dim");
  // lse_buf (with out_buf): another group's (out, lse) of the same union, which this group's
  // softmax is merged into, in place, by log-sum-exp.
  const bool merge = lse_buf.numel() > 0;
  TORCH_CHECK(!merge || (out_buf.numel() && lse_buf.is_contiguous() && lse_buf.numel() == P.b * P.h * P.n &&
                         lse_buf.scalar_type() == acc_type(q)),
              "blocksparse: lse_buf needs out_buf and must be a contiguous (b, h, n) in the accumulation dtype");
  at::Tensor lse = merge ? lse_buf : at::empty({P.b, P.h, P.n}, q.options().dtype(acc_type(q)));
  if (q.scalar_type() == at::kFloat) {
    forward_impl<float>(P, q, k, v, bp, out, lse, group, merge);
  } else if (q.scalar_type() == at::kDouble) {
    forward_impl<double>(P, q, k, v, bp, out, lse, group, merge);
  } else {
    forward_impl<c10::BFloat16>(P, q, k, v, bp, out, lse, group, merge);
  }
  return {out, lse};
}

// delta = rowsum(dout * out) - d lse (blocksparse_rowdot; the caller forms it: the lse is an
// output too). round_grads: for bf16 q, return dq, dk, dv in bf16 (else in fp32, for a caller that
// sums several groups' gradients first).
std::vector<at::Tensor> blocksparse_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                             const at::Tensor& q_index, const at::Tensor& q_valid,
                                             const at::Tensor& k_index, const at::Tensor& row_ptr,
                                             const at::Tensor& cols, const at::Tensor& mids, const at::Tensor& widths,
                                             const at::Tensor& masks,
                                             const at::Tensor& key_padding, const at::Tensor& bias, int64_t block,
                                             bool per_head, bool q_ident, bool k_ident, double scale, double dropout,
                                             int64_t seed, const at::Tensor& lse, const at::Tensor& delta,
                                             const at::Tensor& dout, bool bias_grad, int64_t group,
                                             bool round_grads, const at::Tensor& dq_buf, const at::Tensor& dk_buf,
                                             const at::Tensor& dv_buf, bool accumulate) {
  const Plan P = make_plan(q, k, v, q_index, q_valid, k_index, row_ptr, cols, mids, widths, masks, key_padding, block, per_head,
                           q_ident, k_ident, scale, dropout, seed);
  const at::Tensor* bp = checked_bias(bias, q, P.m);
  TORCH_CHECK(group >= 1, "blocksparse: group must be positive");
  TORCH_CHECK(dout.sizes() == q.sizes() && dout.stride(3) == 1 && dout.scalar_type() == q.scalar_type(),
              "blocksparse: dout must match q");
  TORCH_CHECK(lse.is_contiguous() && delta.is_contiguous() && lse.numel() == P.b * P.h * P.n &&
                  delta.numel() == lse.numel() && lse.scalar_type() == acc_type(q) &&
                  delta.scalar_type() == acc_type(q),
              "blocksparse: lse and delta must be contiguous (b, h, n), float32 for bfloat16 q");
  // Fewer (batch, kv head) pairs than twice the threads: split query tiles so every thread has work.
  const int64_t pairs = P.b * P.hk, threads = at::get_num_threads();
  const int64_t chunks = pairs >= 2 * threads ? 1 : std::min<int64_t>(P.nqt, (2 * threads + pairs - 1) / pairs);
  // The kernel writes every row of dq (zeros for queries no plan entry covers) and zeroes each
  // task's dk/dv slab before accumulating into it.
  // dK, dV accumulate in the accumulation dtype (float32 for bfloat16 inputs).
  const auto acc = q.options().dtype(acc_type(q));
  const bool rounded = round_grads && q.scalar_type() == at::kBFloat16;
  // dq_buf, dk_buf, dv_buf: the caller's (b, h | hk, n | m, e) views to write the gradients into
  // (one head group of larger ones, or one union's gradients that several groups add into).
  const bool bufs = dq_buf.numel() > 0;
  // The buffers' dtype: the gradients' (bf16 when rounded, else the accumulation dtype).
  const at::ScalarType grad_type = rounded ? q.scalar_type() : acc_type(q);
  TORCH_CHECK(!bufs || (dq_buf.sizes() == q.sizes() && dk_buf.sizes() == k.sizes() &&
                        dv_buf.sizes() == v.sizes() && dq_buf.stride(3) == 1 && dk_buf.stride(3) == 1 &&
                        dv_buf.stride(3) == 1 && dq_buf.scalar_type() == grad_type &&
                        dk_buf.scalar_type() == grad_type && dv_buf.scalar_type() == grad_type),
              "blocksparse: dq_buf, dk_buf, dv_buf must match q, k, v (contiguous last dim), in q's dtype with "
              "round_grads, else in the accumulation dtype");
  // accumulate: add into the buffers (another group of the same union wrote them first), not into
  // rounded bf16 ones, which would round each group's share.
  TORCH_CHECK(!accumulate || (bufs && !rounded),
              "blocksparse: accumulate needs dq_buf, dk_buf, dv_buf in the accumulation dtype (no round_grads)");
  at::Tensor dq = bufs ? dq_buf : at::empty({P.b, P.h, P.n, P.e}, rounded ? q.options() : acc);
  // Unrounded gradients with the caller's buffers and one chunk accumulate straight into them: no slabs.
  const int64_t slabs = bufs && chunks == 1 && !rounded ? 0 : chunks;
  at::Tensor dk = at::empty({slabs, P.b, P.hk, P.m, P.e}, acc);
  at::Tensor dv = at::empty({slabs, P.b, P.hk, P.m, P.e}, acc);
  at::Tensor db = bias_grad && bp ? at::zeros({P.b, P.h, P.n, P.m}, acc) : at::empty({0}, acc);
  at::Tensor* dbp = db.numel() ? &db : nullptr;
  at::Tensor dk_direct = dk_buf, dv_direct = dv_buf;  // named: backward_impl takes pointers
  at::Tensor* dko = bufs && chunks == 1 ? &dk_direct : nullptr;
  at::Tensor* dvo = bufs && chunks == 1 ? &dv_direct : nullptr;
  if (q.scalar_type() == at::kFloat) {
    backward_impl<float, float>(P, q, k, v, bp, lse, delta, dout, dq, dk, dv, dko, dvo, dbp, chunks, group, accumulate);
  } else if (q.scalar_type() == at::kDouble) {
    backward_impl<double, double>(P, q, k, v, bp, lse, delta, dout, dq, dk, dv, dko, dvo, dbp, chunks, group,
                                  accumulate);
  } else if (!rounded) {
    backward_impl<c10::BFloat16, float>(P, q, k, v, bp, lse, delta, dout, dq, dk, dv, dko, dvo, dbp, chunks, group,
                                        accumulate);
  } else {
    at::Tensor dk_out = dk_buf, dv_out = dv_buf;  // with one chunk the tasks round their own slabs into these
    if (chunks == 1 && !bufs) {
      dk_out = at::empty({P.b, P.hk, P.m, P.e}, q.options());
      dv_out = at::empty({P.b, P.hk, P.m, P.e}, q.options());
    }
    backward_impl<c10::BFloat16, c10::BFloat16>(P, q, k, v, bp, lse, delta, dout, dq, dk, dv,
                                                chunks == 1 ? &dk_out : nullptr, chunks == 1 ? &dv_out : nullptr,
                                                dbp, chunks, group, false);
    if (chunks == 1) return {dq, dk_out, dv_out, db};
    if (bufs) {
      dk_buf.copy_(dk.sum(0));
      dv_buf.copy_(dv.sum(0));
      return {dq, dk_buf, dv_buf, db};
    }
    return {dq, dk.sum(0).to(at::kBFloat16), dv.sum(0).to(at::kBFloat16), db};
  }
  if (bufs) {
    if (chunks > 1 && accumulate) {
      dk_buf.add_(dk.sum(0));
      dv_buf.add_(dv.sum(0));
    } else if (chunks > 1) {
      dk_buf.copy_(dk.sum(0));
      dv_buf.copy_(dv.sum(0));
    }
    return {dq, dk_buf, dv_buf, db};
  }
  if (chunks > 1) return {dq, dk.sum(0), dv.sum(0), db};
  return {dq, dk[0], dv[0], db};
}

// rowsum(a * b) - c over the last dim of two (b, h, n, e) tensors (last dim contiguous; a and b in
// their own dtypes, bf16 and fp32 mixed as a union's backward has them), c (b, h, n) or empty:
// FlashAttention-2's D = rowsum(dO * O) - d lse, in the accumulation dtype, without the full-size
// temporaries that (dO * O).sum(-1) makes.
template <typename X, typename Y, typename R>
void rowdot_impl(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, at::Tensor& out) {
  const View<X> Av(a);
  const View<Y> Bv(b);
  const int64_t H = a.size(1), n = a.size(2), e = a.size(3);
  const R* cp = c.numel() ? c.data_ptr<R>() : nullptr;
  R* op = out.data_ptr<R>();
  at::parallel_for(0, a.size(0) * H * n, 2048, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t i = r % n, h = (r / n) % H, bb = r / (n * H);
      const X* x = Av.row(bb, h, i);
      const Y* y = Bv.row(bb, h, i);
      R sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t d = 0; d < e; ++d) sum += R(x[d]) * R(y[d]);
      op[r] = cp ? sum - cp[r] : sum;
    }
  });
}

at::Tensor blocksparse_rowdot(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
  TORCH_CHECK(a.dim() == 4 && a.sizes() == b.sizes() && a.stride(3) == 1 && b.stride(3) == 1,
              "blocksparse_rowdot: a and b must be (b, h, n, e) with a contiguous last dim");
  const auto ta = a.scalar_type(), tb = b.scalar_type();
  const at::ScalarType r = ta == at::kDouble ? at::kDouble : at::kFloat;
  TORCH_CHECK(c.numel() == 0 || (c.is_contiguous() && c.numel() == a.numel() / a.size(3) && c.scalar_type() == r),
              "blocksparse_rowdot: c must be empty or contiguous (b, h, n) in the result's dtype");
  at::Tensor out = at::empty({a.size(0), a.size(1), a.size(2)}, a.options().dtype(r));
  if (ta == at::kDouble && tb == at::kDouble) {
    rowdot_impl<double, double, double>(a, b, c, out);
  } else if (ta == at::kFloat && tb == at::kFloat) {
    rowdot_impl<float, float, float>(a, b, c, out);
  } else if (ta == at::kBFloat16 && tb == at::kBFloat16) {
    rowdot_impl<c10::BFloat16, c10::BFloat16, float>(a, b, c, out);
  } else if (ta == at::kBFloat16 && tb == at::kFloat) {
    rowdot_impl<c10::BFloat16, float, float>(a, b, c, out);
  } else {
    TORCH_CHECK(false, "blocksparse_rowdot: unsupported dtypes ", ta, " and ", tb);
  }
  return out;
}

// Switches the in-place time split (TimeSplit, common.h) on or off and returns what it gathered
// since the previous call, in ns summed over threads: [time inside the tile loops, of which inside
// tile GEMMs, the number of GEMM calls, then each Section]. It covers every kernel that runs its
// tiles through for_tiles (block-sparse and LSH).
std::vector<int64_t> kernel_time_split(bool on) {
  std::vector<int64_t> out{TimeSplit::busy.exchange(0), TimeSplit::gemm.exchange(0), TimeSplit::calls.exchange(0)};
  for (auto& x : TimeSplit::section) out.push_back(x.exchange(0));
  TimeSplit::on = on;
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tfamily_native, m) {
  m.def("blocksparse_forward(Tensor q, Tensor k, Tensor v, Tensor q_index, Tensor q_valid, Tensor k_index, "
        "Tensor row_ptr, Tensor cols, Tensor mids, Tensor widths, Tensor masks, Tensor key_padding, Tensor bias, int block, "
        "bool per_head, bool q_ident, bool k_ident, float scale, float dropout, int seed, int group, Tensor out_buf, "
        "Tensor lse_buf) -> Tensor[]");
  m.def("blocksparse_backward(Tensor q, Tensor k, Tensor v, Tensor q_index, Tensor q_valid, Tensor k_index, "
        "Tensor row_ptr, Tensor cols, Tensor mids, Tensor widths, Tensor masks, Tensor key_padding, Tensor bias, int block, "
        "bool per_head, bool q_ident, bool k_ident, float scale, float dropout, int seed, Tensor lse, "
        "Tensor delta, Tensor dout, bool bias_grad, int group, bool round_grads, Tensor dq_buf, Tensor dk_buf, "
        "Tensor dv_buf, bool accumulate) -> Tensor[]");
  m.def("blocksparse_rowdot(Tensor a, Tensor b, Tensor c) -> Tensor");
  // No tensor argument to dispatch on: registered with its function (a catch-all kernel).
  m.def("kernel_time_split(bool on) -> int[]", &kernel_time_split);
}

TORCH_LIBRARY_IMPL(tfamily_native, CPU, m) {
  m.impl("blocksparse_forward", &blocksparse_forward);
  m.impl("blocksparse_backward", &blocksparse_backward);
  m.impl("blocksparse_rowdot", &blocksparse_rowdot);
}
