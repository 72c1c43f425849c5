// LSH kernels, attend family (per Highway target): the fused sampled pass (static and sampled
// tokens in one online softmax, log u from the table), the dense pass, their softmax blocks and
// value accumulation, and the merge of partial results (SampledAttentionArgs, DenseAttentionArgs,
// MergeArgs, lsh_kernels.h).

#if defined(PIG_RUNTIME_KERNELS_LSH_ATTEND_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PIG_RUNTIME_KERNELS_LSH_ATTEND_INL_H_
#undef PIG_RUNTIME_KERNELS_LSH_ATTEND_INL_H_
#else
#define PIG_RUNTIME_KERNELS_LSH_ATTEND_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "hwy/base.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "pig/runtime/lsh_kernels.h"
#include "runtime/kernels/lsh_common-inl.h"
#include "runtime/kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace pig::runtime::lsh::HWY_NAMESPACE {

// Tokens per softmax block (a multiple of N on every target). Each block ends in a chain of
// dependent steps (max of its logits, exp, sum, rescale of the accumulators) that later rows
// cannot overlap; 64 rows amortise it. Interleaved pairs on the Xeon (n = 128k, bf16), 16 -> 64:
// sampled vs dense 21.7-22.4x -> 23.9-24.5x at d = 64, 41.9-42.0x -> 43.1-43.5x at d = 128,
// GQA 3 5.7-5.8x -> 6.6-7.4x; 128 was no better than 64 (39.8-40.5x at d = 128).
// The block is a schedule knob (Schedule::block, lsh_schedule.h); its default is 64. Every
// function below that uses it takes the schedule kS as a template parameter and names
// `constexpr std::size_t kBlock = kS.block` locally.
//
// Sampled K and V rows are prefetched Schedule::prefetch rows ahead of the row being scored
// (default 8), one row's prefetches per row scored. Issuing a whole block's prefetches at once (64
// cache lines) overran the core's outstanding-miss buffers, so most of them were dropped and the
// gathers stalled.
//
// The dense pass prefetches K and V Schedule::dense_prefetch rows ahead too (default 64; one row
// per row scored). The hardware prefetchers alone left it at 6-10 GB/s; 64 rows ahead gave
// 1.15-1.3x at n = 128k (bf16, d = 64 and 128, one head and a group of 3; interleaved A/B runs).

// Online-softmax state of G heads. Vectors q, mean and acc are in kernel order (simd-inl.h).
struct Heads {
  std::size_t d = 0;
  float *q = nullptr;    // G * d
  float *acc = nullptr;  // G * d
  float *mean = nullptr; // d (sampled only)
  float m[kMaxGroup], l[kMaxGroup], qnorm[kMaxGroup];
  float qmu[kMaxGroup]; // q_h . mean (double, rounded once): q.(k - mean) = q.k - q.mean
  bool bad[kMaxGroup];  // a NaN or +inf logit was seen: the result is NaN
  float scale = 0;
  int mask_shift = 0; // heads of this chunk are bits [mask_shift, mask_shift + G) of the masks
};

// Scores of nb (<= kBlock) rows for every head: z[h * kBlock + i] = scale q_h . k_i. Sampled
// blocks also get c[h * kBlock + i] = q_h . (k_i - mean), as q_h . k_i - q_h . mean (one dot
// product per head and row instead of two), and nn[i] = |k_i - mean|^2 (once per row, shared by
// the heads).
template <int kG, int kD, typename Row, bool kSampled, Schedule kS>
HWY_INLINE void ScoreRows(const Heads &st, const Row *const *rows, std::size_t nb,
                          float *HWY_RESTRICT z, float *HWY_RESTRICT c, float *HWY_RESTRICT nn,
                          const Row *const *pf_k = nullptr, const Row *const *pf_v = nullptr) {
  const DF df;
  const std::size_t N = hn::Lanes(df);
  const std::size_t d = kD ? std::size_t(kD) : st.d;
  const std::size_t dv = sd::VectorPart<Row>(d);
  constexpr std::size_t kBlock = std::size_t(kS.block);
  for (std::size_t i = 0; i < nb; ++i) {
    const Row *row = rows[i];
    if (pf_k && pf_k[i]) { // the rows the schedule's prefetch distance ahead of this one
      if constexpr (!kSampled && std::is_same_v<Row, Q8>) {
        // Consecutive rows: a line the previous row ends in is already on its way.
        sd::PrefetchRowTail(pf_k[i], sd::RowBytes<Row>(d));
        sd::PrefetchRowTail(pf_v[i], sd::RowBytes<Row>(d));
      } else {
        sd::PrefetchRow(pf_k[i], sd::RowBytes<Row>(d));
        sd::PrefetchRow(pf_v[i], sd::RowBytes<Row>(d));
      }
    }
    VF s[kG], cs[kG];
    VF n2 = hn::Zero(df);
    for (int h = 0; h < kG; ++h) {
      s[h] = hn::Zero(df);
      cs[h] = hn::Zero(df);
    }
    for (std::size_t j = 0; j < dv / (2 * N); ++j) {
      VF a, b;
      if constexpr (!kSampled && kG == 1 && std::is_same_v<Row, Q8>) {
        // One head, q8: the block's scale multiplies its partial dot product (3 operations per
        // pair instead of 4).
        sd::LoadPairRaw(row, j, a, b);
        const VF qa = hn::LoadU(df, st.q + 2 * j * N);
        const VF qb = hn::LoadU(df, st.q + 2 * j * N + N);
        s[0] =
            hn::MulAdd(hn::MulAdd(qb, b, hn::Mul(qa, a)), hn::Set(df, sd::PairScale(row, j)), s[0]);
        continue;
      }
      sd::LoadPair(row, j, a, b);
      VF ca = a, cb = b;
      if constexpr (kSampled) {
        ca = hn::Sub(a, hn::LoadU(df, st.mean + 2 * j * N));
        cb = hn::Sub(b, hn::LoadU(df, st.mean + 2 * j * N + N));
        n2 = hn::MulAdd(ca, ca, n2);
        n2 = hn::MulAdd(cb, cb, n2);
      }
      for (int h = 0; h < kG; ++h) {
        const VF qa = hn::LoadU(df, st.q + h * d + 2 * j * N);
        const VF qb = hn::LoadU(df, st.q + h * d + 2 * j * N + N);
        if constexpr (kSampled) {
          // Two chains per head (a and b halves), like the dense scores.
          s[h] = hn::MulAdd(qa, a, s[h]);
          cs[h] = hn::MulAdd(qb, b, cs[h]);
        } else {
          // Two chains per head: one FMA chain of 2 d / N steps is latency-bound (5 cycles
          // each) and was the dense kernel's limit at d = 128.
          s[h] = hn::MulAdd(qa, a, s[h]);
          cs[h] = hn::MulAdd(qb, b, cs[h]);
        }
      }
    }
    float tn = 0, ts[kG];
    for (int h = 0; h < kG; ++h)
      ts[h] = 0;
    for (std::size_t k = dv; k < d; ++k) { // scalar tail (d not a multiple of 2N)
      const float x = sd::ScalarAt(row, k);
      const float cx = kSampled ? x - st.mean[k] : x;
      tn += cx * cx;
      for (int h = 0; h < kG; ++h)
        ts[h] += st.q[h * d + k] * x;
    }
    for (int h = 0; h < kG; ++h) {
      if constexpr (kSampled) {
        const float dot = hn::GetLane(hn::SumOfLanes(df, hn::Add(s[h], cs[h]))) + ts[h];
        z[h * kBlock + i] = st.scale * dot;
        c[h * kBlock + i] = dot - st.qmu[h];
      } else {
        z[h * kBlock + i] =
            st.scale * (hn::GetLane(hn::SumOfLanes(df, hn::Add(s[h], cs[h]))) + ts[h]);
      }
    }
    if constexpr (kSampled)
      nn[i] = hn::GetLane(hn::SumOfLanes(df, n2)) + tn;
  }
}

// z -= log u for a block of sampled tokens of head h; heads that did not sample a token get
// z = -inf. log u = h(p) + t K log p with p = 1 - acos(cos)/pi (table in LogUTable).
template <Schedule kS>
HWY_INLINE void SubtractLogU(const LogUTable &lut, float qnorm, const float *HWY_RESTRICT c,
                             const float *HWY_RESTRICT kn, const uint8_t *masks, int bit,
                             std::size_t nb, float *HWY_RESTRICT z) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const std::size_t N = hn::Lanes(df);
  const VF zero = hn::Zero(df), one = hn::Set(df, 1.0f);
  const VF ninf = hn::Set(df, -HUGE_VALF);
  const VF inv_pi = hn::Set(df, 0.318309886183790672f);
  const VF size = hn::Set(df, float(lut.size));
  const VF vtk = hn::Set(df, lut.tk);
  const VF floor_log_u = hn::Set(df, -744.44007f); // log(denorm_min of double), as pig::ref
  const VF vq = hn::Set(df, qnorm);
  constexpr std::size_t kBlock = std::size_t(kS.block);
  for (std::size_t i = 0; i < kBlock; i += N) {
    const VF knorm = hn::LoadU(df, kn + i); // |k_i - mean|, computed once for the group
    const VF den = hn::Mul(vq, knorm);
    // A zero-norm vector has no direction: cosine 0 (pig::ref::cosine).
    const VF cosv = hn::IfThenElseZero(hn::Gt(den, zero), hn::Div(hn::LoadU(df, c + i), den));
    const VF p = hn::NegMulAdd(sd::AcosClamped(df, cosv), inv_pi, one);
    const VF ps = hn::IfThenElse(hn::IsNaN(p), zero, p); // NaN must not index the table
    const VF x = hn::Mul(ps, size);
    const auto i0 = hn::Min(hn::ConvertTo(di, hn::Floor(x)), hn::Set(di, lut.size - 1));
    const VF frac = hn::Sub(x, hn::ConvertTo(df, i0));
    const VF h0 = hn::GatherIndex(df, lut.h, i0);
    const VF h1 = hn::GatherIndex(df, lut.h + 1, i0);
    const VF hp = hn::MulAdd(frac, hn::Sub(h1, h0), h0);
    VF log_u = hn::MulAdd(vtk, sd::LogF(df, p), hp); // p = 0: -inf, floored below; NaN stays
    log_u = hn::IfThenElse(hn::Lt(log_u, floor_log_u), floor_log_u, log_u);
    VF zi = hn::Sub(hn::LoadU(df, z + i), log_u);
    if (masks) {
      alignas(64) float member[kBlock];
      for (std::size_t k = 0; k < N; ++k)
        member[k] = (i + k < nb && ((masks[i + k] >> bit) & 1)) ? 1.0f : 0.0f;
      zi = hn::IfThenElse(hn::Gt(hn::Load(df, member), zero), zi, ninf);
    }
    hn::StoreU(zi, df, z + i);
  }
}

// Softmax weights of one block for head h (updates m, l, rescales acc): w[i] = e^{z_i - m}.
template <int kD, Schedule kS>
HWY_INLINE void BlockWeights(Heads &st, int h, std::size_t nb, float *HWY_RESTRICT z) {
  const DF df;
  const std::size_t N = hn::Lanes(df);
  const std::size_t d = kD ? std::size_t(kD) : st.d;
  constexpr std::size_t kBlock = std::size_t(kS.block);
  for (std::size_t i = nb; i < kBlock; ++i)
    z[i] = -HUGE_VALF;
  VF vmax = hn::Set(df, -HUGE_VALF);
  auto bad = hn::FirstN(df, 0);
  for (std::size_t i = 0; i < kBlock; i += N) {
    const VF zi = hn::LoadU(df, z + i);
    bad = hn::Or(bad, hn::Or(hn::IsNaN(zi), hn::Eq(zi, hn::Set(df, HUGE_VALF))));
    vmax = hn::Max(vmax, zi);
  }
  if (!hn::AllFalse(df, bad))
    st.bad[h] = true;
  const float bm = hn::GetLane(hn::MaxOfLanes(df, vmax));
  const float m_new = std::max(st.m[h], bm);
  if (!(m_new > -HUGE_VALF) || !(m_new < HUGE_VALF)) { // nothing attended yet, or bad
    for (std::size_t i = 0; i < kBlock; ++i)
      z[i] = 0.0f;
    return;
  }
  if (m_new > st.m[h]) {
    const float f = st.l[h] > 0 ? std::exp(st.m[h] - m_new) : 0.0f;
    st.l[h] *= f;
    float *acc = st.acc + h * d;
    const VF vf = hn::Set(df, f);
    std::size_t k = 0;
    for (; k + N <= d; k += N)
      hn::StoreU(hn::Mul(vf, hn::LoadU(df, acc + k)), df, acc + k);
    for (; k < d; ++k)
      acc[k] *= f;
    st.m[h] = m_new;
  }
  const VF vm = hn::Set(df, m_new);
  VF sum = hn::Zero(df);
  for (std::size_t i = 0; i < kBlock; i += N) {
    const VF w = sd::ExpClamped(df, hn::Sub(hn::LoadU(df, z + i), vm));
    sum = hn::Add(sum, w);
    hn::StoreU(w, df, z + i);
  }
  st.l[h] += hn::GetLane(hn::SumOfLanes(df, sum));
}

// acc_h += sum_i w[h][i] v_i over the block, one vector pair of every row at a time so the
// accumulators stay in registers.
template <int kG, int kD, typename Row, Schedule kS>
HWY_INLINE void AccumulateValues(Heads &st, const Row *const *rows, std::size_t nb,
                                 const float *HWY_RESTRICT w) {
  const DF df;
  const std::size_t N = hn::Lanes(df);
  const std::size_t d = kD ? std::size_t(kD) : st.d;
  constexpr std::size_t kBlock = std::size_t(kS.block);
  const std::size_t dv = sd::VectorPart<Row>(d);
  for (std::size_t j = 0; j < dv / (2 * N); ++j) {
    VF aa[kG], ab[kG];
    for (int h = 0; h < kG; ++h) {
      aa[h] = hn::LoadU(df, st.acc + h * d + 2 * j * N);
      ab[h] = hn::LoadU(df, st.acc + h * d + 2 * j * N + N);
    }
    std::size_t i = 0;
    if constexpr (kG == 1) {
      // One head has only two accumulator chains: add a second pair over alternate tokens.
      VF ca = hn::Zero(df), cb = hn::Zero(df);
      for (; i + 2 <= nb; i += 2) {
        VF a0, b0, a1, b1;
        // A q8 row's scale goes into its weight (PairScale is 1 for f32 and bf16).
        sd::LoadPairRaw(rows[i], j, a0, b0);
        sd::LoadPairRaw(rows[i + 1], j, a1, b1);
        const VF w0 = hn::Set(df, w[i] * sd::PairScale(rows[i], j));
        const VF w1 = hn::Set(df, w[i + 1] * sd::PairScale(rows[i + 1], j));
        aa[0] = hn::MulAdd(w0, a0, aa[0]);
        ab[0] = hn::MulAdd(w0, b0, ab[0]);
        ca = hn::MulAdd(w1, a1, ca);
        cb = hn::MulAdd(w1, b1, cb);
      }
      aa[0] = hn::Add(aa[0], ca);
      ab[0] = hn::Add(ab[0], cb);
    }
    for (; i < nb; ++i) {
      VF a, b;
      sd::LoadPairRaw(rows[i], j, a, b);
      const float sc = sd::PairScale(rows[i], j);
      for (int h = 0; h < kG; ++h) {
        const VF wv = hn::Set(df, w[h * kBlock + i] * sc);
        aa[h] = hn::MulAdd(wv, a, aa[h]);
        ab[h] = hn::MulAdd(wv, b, ab[h]);
      }
    }
    for (int h = 0; h < kG; ++h) {
      hn::StoreU(aa[h], df, st.acc + h * d + 2 * j * N);
      hn::StoreU(ab[h], df, st.acc + h * d + 2 * j * N + N);
    }
  }
  for (std::size_t k = dv; k < d; ++k)
    for (std::size_t i = 0; i < nb; ++i) {
      const float x = sd::ScalarAt(rows[i], k);
      for (int h = 0; h < kG; ++h)
        st.acc[h * d + k] += w[h * kBlock + i] * x;
    }
}

template <int kG, int kD, typename Row, Schedule kS>
HWY_INLINE void DenseRange(Heads &st, const sd::RowSource<Row> &k, const sd::RowSource<Row> &v,
                           std::size_t begin, std::size_t end) {
  constexpr std::size_t kBlock = std::size_t(kS.block);
  constexpr std::size_t kAhead = std::size_t(kS.dense_prefetch);
  alignas(64) float z[kG * kBlock];
  const Row *krows[kBlock];
  const Row *vrows[kBlock];
  const Row *pf_k[kBlock], *pf_v[kBlock];
  const std::size_t d = st.d;
  for (std::size_t i0 = begin; i0 < end; i0 += kBlock) {
    const std::size_t nb = std::min(kBlock, end - i0);
    // Row addresses by runs of back-to-back rows (a page of a paged cache; all rows otherwise):
    // one address computation per run, not per row (k and v share one page table).
    for (std::size_t i = 0; i < nb;) {
      const std::size_t run = std::min(nb - i, k.RunFrom(i0 + i));
      const Row *kp = k(i0 + i), *vp = v(i0 + i);
      for (std::size_t j = 0; j < run; ++j, ++i) {
        krows[i] = sd::RowAt(kp, j, d);
        vrows[i] = sd::RowAt(vp, j, d);
      }
    }
    if constexpr (kAhead > 0) {
      for (std::size_t i = 0; i < nb;) {
        const std::size_t f = i0 + i + kAhead;
        if (f >= end) {
          for (; i < nb; ++i)
            pf_k[i] = pf_v[i] = nullptr;
          break;
        }
        const std::size_t run = std::min({nb - i, k.RunFrom(f), end - f});
        const Row *kp = k(f), *vp = v(f);
        for (std::size_t j = 0; j < run; ++j, ++i) {
          pf_k[i] = sd::RowAt(kp, j, d);
          pf_v[i] = sd::RowAt(vp, j, d);
        }
      }
    } else {
      for (std::size_t i = 0; i < nb; ++i)
        pf_k[i] = pf_v[i] = nullptr;
    }
    ScoreRows<kG, kD, Row, false, kS>(st, krows, nb, z, nullptr, nullptr, pf_k, pf_v);
    for (int h = 0; h < kG; ++h)
      BlockWeights<kD, kS>(st, h, nb, z + h * kBlock);
    AccumulateValues<kG, kD, Row, kS>(st, vrows, nb, z);
  }
}

// The one-head state of head h of st (its q and accumulator, its softmax state in slot 0).
HWY_INLINE Heads HeadView(const Heads &st, int h) {
  Heads v = st;
  v.q = st.q + std::size_t(h) * st.d;
  v.acc = st.acc + std::size_t(h) * st.d;
  v.m[0] = st.m[h];
  v.l[0] = st.l[h];
  v.qnorm[0] = st.qnorm[h];
  v.qmu[0] = st.qmu[h];
  v.bad[0] = st.bad[h];
  return v;
}

template <int kG, int kD, typename Row, Schedule kS>
HWY_INLINE void SampledRange(Heads &st, const SampledAttentionArgs &a);

// The sampled tokens of a group whose heads sampled different sets (masks given): each head takes
// its own members of the union, in union (ascending) order, through the one-head pipeline, the
// heads one after another. Scoring every union row for every head (and weighing the non-members
// to zero) made the group pay G times the union in arithmetic. A row in several heads' sets is
// read from memory by the first of them and from cache by the others: the union of a group is
// small (~8k rows, 2 MB at d = 64 and n = 128k) and the heads run back to back. Each head's
// estimator is unchanged: the same tokens with the same weights.
//
// The form before gathered the rows once per window of union rows and took every head's members
// of the window before the next window (so shared rows came from L1/L2). On the Xeon it was the
// slower one: interleaved pairs (pig-bench-attention, pair_sampled_dense GQA 3, d = 64, n =
// 128k, 3 runs each) gave 5.3-5.6x dense for it against 6.4-7.2x for this one; its partial block
// at the end of every window and its per-window compaction cost more than the cache saved.
template <int kG, int kD, typename Row, Schedule kS>
HWY_INLINE void SampledRangePerHead(Heads &st, const SampledAttentionArgs &a) {
  thread_local std::vector<uint32_t> members;
  members.resize(a.count + 1);
  for (int h = 0; h < kG; ++h) {
    const unsigned bit = unsigned(h + st.mask_shift);
    std::size_t nh = 0, i = 0;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    // 16 tokens per compress: 3.0 against 11.7 us for the scalar loop (3 heads of an 8k union).
    const __m128i mbit = _mm_set1_epi8(char(1u << bit));
    for (; i + 16 <= a.count; i += 16) {
      const __mmask16 k =
          _mm_test_epi8_mask(_mm_loadu_si128(reinterpret_cast<const __m128i *>(a.masks + i)), mbit);
      const unsigned cnt = unsigned(_mm_popcnt_u32(k));
      _mm512_mask_storeu_epi32(members.data() + nh, __mmask16((1u << cnt) - 1u),
                               _mm512_maskz_compress_epi32(k, _mm512_loadu_si512(a.tokens + i)));
      nh += cnt;
    }
#endif
    for (; i < a.count; ++i) { // branch-free compaction of head h's members
      members[nh] = a.tokens[i];
      nh += (a.masks[i] >> bit) & 1u;
    }
    Heads one = HeadView(st, h); // shares q and the accumulator with st
    SampledAttentionArgs b = a;
    b.tokens = members.data();
    b.count = nh;
    b.masks = nullptr;
    SampledRange<1, kD, Row, kS>(one, b);
    st.m[h] = one.m[0];
    st.l[h] = one.l[0];
    st.bad[h] = one.bad[0];
  }
}

// Schedule::gqa decides a group's form: per_head above, or union (every union row scored once
// for all heads, SubtractLogU weighting a head's non-members to zero).
template <int kG, int kD, typename Row, Schedule kS>
HWY_INLINE void SampledRange(Heads &st, const SampledAttentionArgs &a) {
  if constexpr (kG > 1 && kS.gqa == GqaStrategy::per_head) {
    if (a.masks) {
      SampledRangePerHead<kG, kD, Row, kS>(st, a);
      return;
    }
  }
  constexpr std::size_t kBlock = std::size_t(kS.block);
  constexpr std::size_t kPrefetchRows = std::size_t(kS.prefetch);
  const std::size_t d = kD ? std::size_t(kD) : st.d;
  const sd::RowSource<Row> k(a.k, d, a.paged), v(a.v, d, a.paged);
  alignas(64) float z[kG * kBlock], c[kG * kBlock], nn[kBlock];
  const Row *krows[kBlock], *vrows[kBlock], *pf_k[kBlock], *pf_v[kBlock];
  const std::size_t row_bytes = sd::RowBytes<Row>(d);
  for (std::size_t i = 0; i < std::min(kPrefetchRows, a.count); ++i) {
    sd::PrefetchRow(k(a.tokens[i]), row_bytes);
    sd::PrefetchRow(v(a.tokens[i]), row_bytes);
  }
  for (std::size_t i0 = 0; i0 < a.count; i0 += kBlock) {
    const std::size_t nb = std::min(kBlock, a.count - i0);
    for (std::size_t i = 0; i < nb; ++i) {
      krows[i] = k(a.tokens[i0 + i]);
      vrows[i] = v(a.tokens[i0 + i]);
      const std::size_t f = i0 + i + kPrefetchRows;
      pf_k[i] = kPrefetchRows > 0 && f < a.count ? k(a.tokens[f]) : nullptr;
      pf_v[i] = kPrefetchRows > 0 && f < a.count ? v(a.tokens[f]) : nullptr;
    }
    for (std::size_t i = nb; i < kBlock; ++i)
      nn[i] = 0;
    ScoreRows<kG, kD, Row, true, kS>(st, krows, nb, z, c, nn, pf_k, pf_v);
    if (a.key_norms) { // fitted hashing: |k'_i| stored at index build
      for (std::size_t i = 0; i < nb; ++i)
        nn[i] = a.key_norms[a.tokens[i0 + i] - a.key_norms_begin];
    } else {
      const DF df;
      for (std::size_t i = 0; i < kBlock; i += hn::Lanes(df))
        hn::Store(hn::Sqrt(hn::Load(df, nn + i)), df, nn + i);
    }
    for (int h = 0; h < kG; ++h) {
      for (std::size_t i = nb; i < kBlock; ++i)
        c[h * kBlock + i] = z[h * kBlock + i] = 0;
      SubtractLogU<kS>(a.log_u, st.qnorm[h], c + h * kBlock, nn, a.masks ? a.masks + i0 : nullptr,
                       h + st.mask_shift, nb, z + h * kBlock);
      BlockWeights<kD, kS>(st, h, nb, z + h * kBlock);
    }
    AccumulateValues<kG, kD, Row, kS>(st, vrows, nb, z);
  }
}

// Prepares the per-call state: q (and mean) in kernel order, accumulators zeroed.
template <typename Row>
HWY_INLINE void InitHeads(Heads &st, const float *q, int G, std::size_t d, float scale,
                          const float *mean, std::vector<float> &buf) {
  buf.assign(std::size_t(2 * G + 1) * d, 0.0f);
  st.d = d;
  st.q = buf.data();
  st.acc = buf.data() + G * d;
  st.mean = buf.data() + 2 * G * d;
  st.scale = scale;
  for (int h = 0; h < G; ++h) {
    sd::ToKernelOrder<Row>(q + h * d, d, st.q + h * d);
    double qq = 0;
    for (std::size_t k = 0; k < d; ++k)
      qq += double(q[h * d + k]) * double(q[h * d + k]);
    st.qnorm[h] = float(std::sqrt(qq));
    st.m[h] = -HUGE_VALF;
    st.l[h] = 0;
    st.bad[h] = false;
  }
  for (int h = 0; h < G; ++h) {
    double qm = 0;
    if (mean)
      for (std::size_t k = 0; k < d; ++k)
        qm += double(q[h * d + k]) * double(mean[k]);
    st.qmu[h] = float(qm);
  }
  if (mean)
    sd::ToKernelOrder<Row>(mean, d, st.mean);
}

template <typename Row>
HWY_INLINE void FinishHeads(const Heads &st, int G, float *out, float *lse) {
  const std::size_t d = st.d;
  for (int h = 0; h < G; ++h) {
    float *o = out + h * d;
    if (st.bad[h]) {
      std::fill(o, o + d, std::numeric_limits<float>::quiet_NaN());
      lse[h] = std::numeric_limits<float>::quiet_NaN();
    } else if (!(st.l[h] > 0)) {
      std::fill(o, o + d, 0.0f);
      lse[h] = -HUGE_VALF;
    } else {
      sd::FromKernelOrder<Row>(st.acc + h * d, d, o);
      const float inv = 1.0f / st.l[h];
      for (std::size_t k = 0; k < d; ++k)
        o[k] *= inv;
      lse[h] = st.m[h] + std::log(st.l[h]);
    }
  }
}

template <int kG, int kD, typename Row, Schedule kS> void DenseG(const DenseAttentionArgs &a) {
  thread_local std::vector<float> buf;
  Heads st;
  InitHeads<Row>(st, a.q, kG, a.d, a.scale, nullptr, buf);
  const std::size_t d = kD ? std::size_t(kD) : a.d;
  DenseRange<kG, kD, Row, kS>(st, sd::RowSource<Row>(a.k, d, a.paged),
                              sd::RowSource<Row>(a.v, d, a.paged), a.begin, a.end);
  FinishHeads<Row>(st, kG, a.out, a.lse);
}

template <int kG, int kD, typename Row, Schedule kS>
void SampledG(const SampledAttentionArgs &a, int mask_shift) {
  thread_local std::vector<float> buf;
  Heads st;
  InitHeads<Row>(st, a.q, kG, a.d, a.scale, a.mean, buf);
  if (a.query_norms) // fitted hashing: the cosine's query norm is |q'|
    for (int h = 0; h < kG; ++h)
      st.qnorm[h] = a.query_norms[h];
  st.mask_shift = mask_shift;
  const std::size_t d = kD ? std::size_t(kD) : a.d;
  const sd::RowSource<Row> k(a.k, d, a.paged), v(a.v, d, a.paged);
  DenseRange<kG, kD, Row, kS>(st, k, v, 0, a.sink_end);
  SampledRange<kG, kD, Row, kS>(st, a);
  DenseRange<kG, kD, Row, kS>(st, k, v, a.local_begin, a.n);
  FinishHeads<Row>(st, kG, a.out, a.lse);
}

// Dispatch on the group size (a template parameter so per-head accumulators live in registers).
// Groups of more than 4 heads run as chunks of at most 4 (each chunk reads the rows again): the
// instantiations stay few, and common GQA groups (2, 3, 4) are served in one pass.
inline constexpr int kMaxChunk = 4;

// Calls fn(chunk_args, std::integral_constant<int, G>{}, h0) for each chunk of at most kMaxChunk
// heads of args (a Dense- or SampledAttentionArgs), with q, out and lse offset to the chunk.
template <typename Args, typename Fn> HWY_INLINE void ForEachGroupChunk(const Args &a, Fn &&fn) {
  HWY_ASSERT(a.G >= 1 && a.G <= kMaxGroup);
  for (int h0 = 0; h0 < a.G; h0 += kMaxChunk) {
    Args c = a;
    c.G = std::min(kMaxChunk, a.G - h0);
    c.q = a.q + std::size_t(h0) * a.d;
    c.out = a.out + std::size_t(h0) * a.d;
    c.lse = a.lse + h0;
    switch (c.G) {
    case 1:
      fn(c, std::integral_constant<int, 1>{}, h0);
      break;
    case 2:
      fn(c, std::integral_constant<int, 2>{}, h0);
      break;
    case 3:
      fn(c, std::integral_constant<int, 3>{}, h0);
      break;
    default:
      fn(c, std::integral_constant<int, 4>{}, h0);
      break;
    }
  }
}

template <int kD, typename Row, Schedule kS> void DenseChunks(const DenseAttentionArgs &a) {
  ForEachGroupChunk(a, [](const DenseAttentionArgs &c, auto g, int) {
    DenseG<decltype(g)::value, kD, Row, kS>(c);
  });
}

template <int kD, typename Row, Schedule kS> void SampledChunks(const SampledAttentionArgs &a) {
  ForEachGroupChunk(a, [](const SampledAttentionArgs &c, auto g, int h0) {
    SampledAttentionArgs cc = c;
    if (cc.query_norms)
      cc.query_norms += h0;
    SampledG<decltype(g)::value, kD, Row, kS>(cc, h0);
  });
}

template <int kD, typename T, Schedule kS> void SampledAttention(const SampledAttentionArgs &a) {
  Pick<kD>(a.d);
  HWY_ASSERT(a.dtype != DType::q8 || a.d % 32 == 0);
  HWY_ASSERT(a.sink_end <= a.local_begin && a.local_begin <= a.n && a.log_u.h);
  if constexpr (std::is_void_v<T>) {
    if (a.dtype == DType::f32)
      SampledChunks<kD, float, kS>(a);
    else if (a.dtype == DType::q8)
      SampledChunks<kD, Q8, kS>(a);
    else
      SampledChunks<kD, uint16_t, kS>(a);
  } else {
    HWY_ASSERT(a.dtype == DTypeOf<T>());
    SampledChunks<kD, RowOf<T>, kS>(a);
  }
}

template <int kD, typename T, Schedule kS> void DenseAttention(const DenseAttentionArgs &a) {
  Pick<kD>(a.d);
  HWY_ASSERT(a.dtype != DType::q8 || a.d % 32 == 0);
  HWY_ASSERT(a.begin <= a.end);
  if constexpr (std::is_void_v<T>) {
    if (a.dtype == DType::f32)
      DenseChunks<kD, float, kS>(a);
    else if (a.dtype == DType::q8)
      DenseChunks<kD, Q8, kS>(a);
    else
      DenseChunks<kD, uint16_t, kS>(a);
  } else {
    HWY_ASSERT(a.dtype == DTypeOf<T>());
    DenseChunks<kD, RowOf<T>, kS>(a);
  }
}

template <int kD> void Merge(const MergeArgs &m) {
  const std::size_t d = Pick<kD>(m.d);
  for (std::size_t h = 0; h < m.heads; ++h) {
    const float a = m.lse_a[h], b = m.lse_b[h];
    const float *oa = m.out_a + h * d, *ob = m.out_b + h * d;
    float *o = m.out + h * d;
    if (std::isnan(a) || std::isnan(b)) {
      std::fill(o, o + d, std::numeric_limits<float>::quiet_NaN());
      m.lse[h] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    if (a == -HUGE_VALF || b == -HUGE_VALF) { // an empty part is the identity
      const float *src = a == -HUGE_VALF ? ob : oa;
      if (o != src)
        std::copy(src, src + d, o);
      m.lse[h] = a == -HUGE_VALF ? b : a;
      continue;
    }
    const float mx = std::max(a, b);
    const float wa = std::exp(a - mx), wb = std::exp(b - mx);
    const float inv = 1.0f / (wa + wb);
    for (std::size_t k = 0; k < d; ++k)
      o[k] = (wa * oa[k] + wb * ob[k]) * inv;
    m.lse[h] = mx + std::log1p(std::min(wa, wb));
  }
}

// The part of a schedule each entry point depends on (the other knobs at their defaults), so that
// schedules differing only in, say, tables_ahead share one instantiation of the attention passes.
constexpr Schedule ForSampled(Schedule s) {
  Schedule r;
  r.gqa = s.gqa;
  r.block = s.block;
  r.prefetch = s.prefetch;
  r.dense_prefetch = s.dense_prefetch; // the static tokens run through DenseRange
  return r;
}
constexpr Schedule ForDense(Schedule s) {
  Schedule r;
  r.block = s.block;
  r.dense_prefetch = s.dense_prefetch;
  return r;
}

} // namespace pig::runtime::lsh::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif // PIG_RUNTIME_KERNELS_LSH_ATTEND_INL_H_ toggle
