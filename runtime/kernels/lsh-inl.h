// LSH sampling attention kernels (ALGORITHM.md section 1), per Highway target: query/key
// encoding, index build, retrieval, the fused sampled-attention pass, dense attention, merge.
//
// Every kernel is a template `template <int kK, int kL, int kD, typename T>` (or the subset of
// those parameters it uses) in which 0 means "taken from the run-time arguments" and T = void
// means "dtype taken from the arguments": MakeKernelSet<0, 0, 0, void> is the generic set, and a
// specialised set is an instantiation with constants, e.g. MakeKernelSet<10, 150, 64,
// hwy::bfloat16_t>. A specialised kernel checks (HWY_ASSERT) that the run-time arguments agree.
//
// ---- contract for generated code (pig-translate emits exactly this shape, one file per key) ---
//   #undef HWY_TARGET_INCLUDE
//   #define HWY_TARGET_INCLUDE "<path of this file, relative to an include dir>"
//   #include "hwy/foreach_target.h" // IWYU pragma: keep
//   #include "hwy/highway.h"
//   #include "runtime/kernels/lsh-inl.h"
//   HWY_BEFORE_NAMESPACE();
//   namespace pig_lsh_k10_l150_d64_bf16::HWY_NAMESPACE {
//   pig::runtime::lsh::LshKernelSet Make() {
//     return pig::runtime::lsh::HWY_NAMESPACE::MakeKernelSet<10, 150, 64, hwy::bfloat16_t>();
//   }
//   } // namespace pig_lsh_k10_l150_d64_bf16::HWY_NAMESPACE
//   HWY_AFTER_NAMESPACE();
//   #if HWY_ONCE
//   namespace pig_lsh_k10_l150_d64_bf16 {
//   HWY_EXPORT(Make);
//   pig::runtime::lsh::LshKernelSet Factory() { return HWY_DYNAMIC_DISPATCH(Make)(); }
//   PIG_REGISTER_LSH_KERNELS(k10_l150_d64_bf16, 10, 150, 64, bf16, &Factory);
//   } // namespace pig_lsh_k10_l150_d64_bf16
//   #endif
// Rules: dtype is f32 (T = float), bf16 (T = hwy::bfloat16_t) or q8 (T = pig::runtime::lsh::Q8,
// d a multiple of 32); d must be even; K in [1, 16],
// L in [1, 1024]. The include path needs the project root (runtime/kernels/...) and
// runtime/include. The TU must be linked whole (its only reference is the static registrar):
// compile it into an OBJECT library or an executable, not a plain static archive.
// tests/kernels/generated_example.cpp is a compiled, tested instance of this contract.
// ------------------------------------------------------------------------------------------------

#if defined(PIG_RUNTIME_KERNELS_LSH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PIG_RUNTIME_KERNELS_LSH_INL_H_
#undef PIG_RUNTIME_KERNELS_LSH_INL_H_
#else
#define PIG_RUNTIME_KERNELS_LSH_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "hwy/base.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "pig/runtime/lsh_kernels.h"
#include "runtime/kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace pig::runtime::lsh::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace sd = pig::runtime::simd::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

inline constexpr std::size_t kSegment = 65535; // tokens per index segment (ids and offsets u16)
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

// Storage type of a row element: f32, bf16 as raw bits, or a byte of a q8 row (sd::RowAt).
template <typename T>
using RowOf = std::conditional_t<std::is_same_v<T, float>, float,
                                 std::conditional_t<std::is_same_v<T, Q8>, Q8, uint16_t>>;
template <typename T> constexpr DType DTypeOf() {
  return std::is_same_v<T, float> ? DType::f32 : std::is_same_v<T, Q8> ? DType::q8 : DType::bf16;
}

template <int kConst> HWY_INLINE std::size_t Pick(std::size_t runtime_value) {
  if constexpr (kConst != 0) {
    HWY_ASSERT(runtime_value == std::size_t(kConst));
    return std::size_t(kConst);
  } else {
    return runtime_value;
  }
}

// ================================ encode ========================================================

// Projections of R rows (f32, natural order, d entries each, row stride d) onto the first `cols`
// columns of W (cols rounded up to a multiple of N; W's stride allows it): proj[r * cstride + c].
template <std::size_t R, int kD>
HWY_INLINE void ProjectRows(const float *HWY_RESTRICT x, std::size_t d_rt, const SimHashView &W,
                            std::size_t cols_pad, float *HWY_RESTRICT proj, std::size_t cstride) {
  const DF df;
  const std::size_t N = hn::Lanes(df);
  const std::size_t d = kD ? std::size_t(kD) : d_rt;
  // Column vectors per block: R * kCB accumulator chains, which must cover the FMA latency
  // (about 8 chains in flight) and, with the kCB loads of W, fit the register file. On AVX-512
  // (32 registers) R = 1 takes 8 and R = 4 takes 4; R = 2 and 3 stayed slower than R = 4 even
  // with 12 and 9 chains (d = 64, Xeon), so EncodeTyped projects them as 4 rows there.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  constexpr std::size_t kCB = R == 1 ? 8 : R == 2 ? 4 : R == 3 ? 3 : R == 4 ? 4 : 2;
#else
  constexpr std::size_t kCB = R == 1 ? 4 : R == 2 ? 3 : 2;
#endif
  std::size_t c = 0;
  for (; c + kCB * N <= cols_pad; c += kCB * N) {
    VF acc[R][kCB];
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t b = 0; b < kCB; ++b)
        acc[r][b] = hn::Zero(df);
    const float *w = W.w + c;
    for (std::size_t k = 0; k < d; ++k, w += W.cols) {
      VF wv[kCB];
      for (std::size_t b = 0; b < kCB; ++b)
        wv[b] = hn::LoadU(df, w + b * N);
      for (std::size_t r = 0; r < R; ++r) {
        const VF xv = hn::Set(df, x[r * d + k]);
        for (std::size_t b = 0; b < kCB; ++b)
          acc[r][b] = hn::MulAdd(xv, wv[b], acc[r][b]);
      }
    }
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t b = 0; b < kCB; ++b)
        hn::StoreU(acc[r][b], df, proj + r * cstride + c + b * N);
  }
  for (; c < cols_pad; c += N) {
    VF acc[R];
    for (std::size_t r = 0; r < R; ++r)
      acc[r] = hn::Zero(df);
    const float *w = W.w + c;
    for (std::size_t k = 0; k < d; ++k, w += W.cols) {
      const VF wv = hn::LoadU(df, w);
      for (std::size_t r = 0; r < R; ++r)
        acc[r] = hn::MulAdd(hn::Set(df, x[r * d + k]), wv, acc[r]);
    }
    for (std::size_t r = 0; r < R; ++r)
      hn::StoreU(acc[r], df, proj + r * cstride + c);
  }
}

// Sign bits of one row's projections. A projection whose f32 value cannot be trusted to have the
// sign of the exact one (|p| within the rounding-error bound, or not finite) is recomputed in
// double in the reference's order, so the codes equal pig::ref::encode bit for bit. The test is
// vectorised (one compare per lane against a bound rounded up by a 2^-20 relative margin, which
// covers the f32 rounding of the bound itself); the rare uncertain lanes take the scalar path.
template <int kK, int kL>
HWY_INLINE void CodesOfRow(const float *HWY_RESTRICT x, std::size_t d, const float *proj,
                           const SimHashView &W, std::size_t K, std::size_t L,
                           uint16_t *HWY_RESTRICT codes) {
  double xx = 0.0;
  for (std::size_t k = 0; k < d; ++k)
    xx += double(x[k]) * double(x[k]);
  // |fl(sum) - sum| <= gamma_d * sum |x_k w_k| <= gamma_d |x| |w_c| (FMA chain: one rounding per
  // step), plus underflow of the products (d * 2^-149 at most).
  const double u = std::ldexp(1.0, -24);
  const double gamma = double(d + 2) * u / (1.0 - double(d + 2) * u) * 1.001;
  const double bx = gamma * std::sqrt(xx);
  const double tiny = double(d) * std::ldexp(1.0, -148);
  const std::size_t cols = K * L;
  auto exact_bit = [&](std::size_t c) {
    const double p = proj[c];
    if (std::fabs(p) > bx * double(W.col_norm[c]) + tiny &&
        std::fabs(p) <= double(std::numeric_limits<float>::max()))
      return p > 0.0;
    double sum = 0.0;
    for (std::size_t k = 0; k < d; ++k)
      sum += double(x[k]) * double(W.w[k * W.cols + c]);
    return sum > 0.0;
  };
  uint64_t bits[(16 * 1024 + 63) / 64 + 1];
  std::memset(bits, 0, ((cols + 63) / 64 + 1) * sizeof(uint64_t));
  const DF df;
  const std::size_t N = hn::Lanes(df);
  const float margin = 1.0f + 1.0f / 1048576.0f;
  const VF vbx = hn::Set(df, float(bx) * margin);
  // tiny (d * 2^-148) is subnormal in f32, and an FMA with a subnormal operand takes a microcode
  // assist on x86 (~150 cycles each): with it this loop cost 5 us per row (Xeon, 94 vectors), half
  // of a one-row encode. Rounding the bound up to the smallest normal float only widens it (more
  // lanes take the exact path, never fewer), and no operand is subnormal.
  const VF vtiny = hn::Set(
      df, float(std::max(tiny * double(margin), double(std::numeric_limits<float>::min()))));
  const VF vmax = hn::Set(df, std::numeric_limits<float>::max());
  const VF zero = hn::Zero(df);
  const std::size_t vec_end = cols / N * N;
  for (std::size_t c = 0; c < vec_end; c += N) {
    const VF p = hn::LoadU(df, proj + c);
    const VF ap = hn::Abs(p);
    const auto ok = hn::And(hn::Gt(ap, hn::MulAdd(vbx, hn::LoadU(df, W.col_norm + c), vtiny)),
                            hn::Le(ap, vmax));
    uint8_t mb[8] = {};
    hn::StoreMaskBits(df, hn::Gt(p, zero), mb);
    uint64_t m = 0;
    std::memcpy(&m, mb, (N + 7) / 8);
    if (N < 64)
      m &= (uint64_t(1) << N) - 1;
    if (HWY_UNLIKELY(!hn::AllTrue(df, ok))) {
      uint8_t ob[8] = {};
      hn::StoreMaskBits(df, ok, ob);
      uint64_t o = 0;
      std::memcpy(&o, ob, (N + 7) / 8);
      for (std::size_t i = 0; i < N; ++i) {
        if (!((o >> i) & 1)) {
          const uint64_t bit = uint64_t(1) << i;
          m = exact_bit(c + i) ? (m | bit) : (m & ~bit);
        }
      }
    }
    bits[c / 64] |= m << (c % 64); // N divides 64: a vector's bits never straddle two words
  }
  for (std::size_t i = 0; i < cols - vec_end; ++i) { // K L not a multiple of N
    const std::size_t cc = vec_end + i;
    bits[cc / 64] |= uint64_t(exact_bit(cc)) << (cc % 64);
  }
  const unsigned kmask = (1u << K) - 1u;
  for (std::size_t l = 0; l < L; ++l) {
    const std::size_t start = l * K, w = start / 64, o = start % 64;
    uint64_t v = bits[w] >> o;
    if (o + K > 64)
      v |= bits[w + 1] << (64 - o);
    codes[l] = uint16_t(unsigned(v) & kmask);
  }
}

template <int kK, int kL, int kD, typename Row> void EncodeTyped(const EncodeArgs &a) {
  const std::size_t K = Pick<kK>(std::size_t(a.W.K)), L = Pick<kL>(std::size_t(a.W.L));
  const std::size_t d = Pick<kD>(a.W.d);
  const std::size_t N = hn::Lanes(DF());
  const std::size_t cols = K * L;
  const std::size_t cols_pad = (cols + N - 1) / N * N;
  HWY_ASSERT(a.W.cols >= cols_pad && a.W.cols % N == 0);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  constexpr std::size_t R = 8; // rows per pass over W (the index build encodes every key)
#else
  constexpr std::size_t R = 4;
#endif
  thread_local std::vector<float> xs, proj;
  xs.resize(R * d);
  proj.resize(R * cols_pad);
  const Row *rows = static_cast<const Row *>(a.x);
  for (std::size_t r0 = 0; r0 < a.rows; r0 += R) {
    const std::size_t nr = std::min(R, a.rows - r0);
    for (std::size_t r = 0; r < nr; ++r) {
      const Row *src = sd::RowAt(rows, r0 + r, d);
      float *dst = xs.data() + r * d;
      for (std::size_t k = 0; k < d; ++k)
        dst[k] = a.mean ? sd::ScalarAt(src, k) - a.mean[k] : sd::ScalarAt(src, k);
    }
    // All rows of a group share each load of W (W is ~0.8 MB at d = 128, K L = 1500: reading it
    // once per query head of a GQA group would dominate the encode).
    std::size_t np = nr; // rows projected
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    // On AVX-512 four rows cost less than two or three (d = 64, Xeon: 9.7 us against 11.6 and
    // 16.0), and eight rows read W half as often as four: project zero rows in place of the
    // missing ones and drop their codes.
    np = nr == 1 ? 1 : nr <= 4 ? 4 : 8;
    std::fill(xs.begin() + nr * d, xs.begin() + np * d, 0.0f);
#endif
    switch (np) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    case 8:
      ProjectRows<8, kD>(xs.data(), d, a.W, cols_pad, proj.data(), cols_pad);
      break;
#endif
    case 4:
      ProjectRows<4, kD>(xs.data(), d, a.W, cols_pad, proj.data(), cols_pad);
      break;
    case 3:
      ProjectRows<3, kD>(xs.data(), d, a.W, cols_pad, proj.data(), cols_pad);
      break;
    case 2:
      ProjectRows<2, kD>(xs.data(), d, a.W, cols_pad, proj.data(), cols_pad);
      break;
    default:
      ProjectRows<1, kD>(xs.data(), d, a.W, cols_pad, proj.data(), cols_pad);
      break;
    }
    for (std::size_t r = 0; r < nr; ++r)
      CodesOfRow<kK, kL>(xs.data() + r * d, d, proj.data() + r * cols_pad, a.W, K, L,
                         a.codes + (r0 + r) * L);
  }
}

// ================================ index build ===================================================

template <int kK, int kL> void BuildIndex(const BuildIndexArgs &a) {
  const std::size_t K = Pick<kK>(std::size_t(a.K)), L = Pick<kL>(std::size_t(a.L));
  const std::size_t buckets = std::size_t(1) << K;
  std::vector<uint32_t> count(buckets + 1);
  std::vector<uint16_t> table(std::min(a.count, kSegment));
  for (std::size_t s0 = 0, s = 0; s0 < a.count; s0 += kSegment, ++s) {
    const std::size_t len = std::min(kSegment, a.count - s0);
    for (std::size_t l = 0; l < L; ++l) {
      for (std::size_t i = 0; i < len; ++i)
        table[i] = a.codes[(s0 + i) * L + l];
      std::fill(count.begin(), count.end(), 0u);
      for (std::size_t i = 0; i < len; ++i)
        ++count[table[i] + 1];
      uint16_t *off = a.offsets + (s * L + l) * (buckets + 1);
      uint32_t run = 0;
      for (std::size_t b = 0; b <= buckets; ++b) {
        run += count[b];
        count[b] = run;
        off[b] = uint16_t(run); // <= len <= 65535
      }
      uint16_t *ids = a.ids + s0 * L + l * len;
      for (std::size_t i = 0; i < len; ++i) // ascending ids within each bucket
        ids[count[table[i]]++] = uint16_t(i);
    }
  }
}

// ================================ retrieval =====================================================

// Walks the query's bucket in every table of every segment: calls list(s, ids, lo, hi) for each
// (segment s, table l) in order, with ids[lo, hi) the bucket's id list (ids relative to the
// segment). Per segment, the bucket offsets of all tables are loaded first (L independent
// misses overlap), then the id lists are prefetched kAhead tables ahead of the one being
// counted. Keep the prefetches in this function's body: a form that issued them from a lambda
// compiled to no prefetch instruction at all (GCC 12.2, every target; see objdump) and ran at
// 1.06-1.24x the public method against 1.43-1.63x for this one.
template <int kK, int kL, int kAhead, typename List>
HWY_INLINE void WalkIndex(const IndexView &ix, const uint16_t *HWY_RESTRICT qc, const List &list) {
  const std::size_t K = kK ? std::size_t(kK) : std::size_t(ix.K);
  const std::size_t L = kL ? std::size_t(kL) : std::size_t(ix.L);
  const std::size_t stride = (std::size_t(1) << K) + 1;
  const std::size_t nseg = (ix.count + kSegment - 1) / kSegment;
  auto offsets = [&](std::size_t i) { // list i = (segment i / L, table i % L)
    return ix.offsets + (i / L * L + i % L) * stride + qc[i % L];
  };
  auto ids_of = [&](std::size_t i, std::size_t &len) {
    const std::size_t seg = i / L;
    len = std::min(kSegment, ix.count - seg * kSegment);
    return ix.ids + seg * kSegment * L + (i % L) * len;
  };
  constexpr std::size_t ahead = std::size_t(kAhead); // tables whose id lists are in flight
  thread_local uint32_t lo_hi[2 * 1024];             // the segment's [lo, hi) per table; L <= 1024
  for (std::size_t s = 0; s < nseg; ++s) {
    for (std::size_t l = 0; l < L; ++l) {
      const uint16_t *o = offsets(s * L + l);
      lo_hi[2 * l] = o[0];
      lo_hi[2 * l + 1] = o[1];
    }
    std::size_t len;
    const uint16_t *ids0 = ids_of(s * L, len);
    for (std::size_t l = 0; l < std::min(ahead, L); ++l)
      sd::PrefetchRow(ids0 + l * len + lo_hi[2 * l], (lo_hi[2 * l + 1] - lo_hi[2 * l]) * 2);
    for (std::size_t l = 0; l < L; ++l) {
      if (ahead > 0 && l + ahead < L) {
        const std::size_t la = l + ahead;
        sd::PrefetchRow(ids0 + la * len + lo_hi[2 * la], (lo_hi[2 * la + 1] - lo_hi[2 * la]) * 2);
      }
      list(s, ids0 + l * len, lo_hi[2 * l], lo_hi[2 * l + 1]);
    }
  }
}

// Counts one head's index entries into the epoch-stamped u8 counters: a counter below `base` is
// stale (left by an earlier head or call) and reads as 0, and a head's count saturates at t + 1,
// so the count of token i is min(max(c_i, base) - base, t + 1) and the head's values stay within
// [base, base + t + 1]; no counter is ever cleared per step. The entry that brings a count to
// exactly t marks the token as a hit, so the tokens reaching t are known when the walk ends: no
// pass over the counters and no branch per entry. Returns the number of hits appended to `hits`
// (vector walk), or 0 with the hits' bits set in `bits` (scalar walk).
//
// Why bytes: the walk's gathers and scatters hit random counters of a 65535-token segment, 64
// KiB of u8 counters against 128 KiB of u16 ones, so more of them stay in L1 (48 KiB here), and
// the scratch is half the size. Measured on the Xeon (AVX3_DL, cached, a harness running this
// walk's loop on copied lists): the benchmark's own lists (n = 128k, 22.3k entries) 18.5-22.2 us
// against 19.1-23.0 us; random ids in lists of those lengths 21.2 against 25.7 us. The walk is
// bound by the scatter (a scatter-only loop costs as much as the whole walk) more than by where
// the counters sit; the interleaved retrieval pair did not move measurably.
//
// AVX-512 (and later x86 targets): one bucket list is taken 16 entries at a time by a 32-bit
// gather of the counters, a max, add and min, and a scatter back (each lane reads and writes its
// u8 counter with its three upper neighbours, which is why the state has kCounterSlack counters
// of slack); hits are compressed onto `hits` as index positions. With the counters in cache the
// walk is bound by instructions per entry, not by memory: the scalar loop takes ~15, the public
// method ~9, this about one vector instruction (the scatter, ~1.2 cycles per entry, is the
// limit). Two lanes of one vector never name the same counter (a token is in a bucket once), and
// when they name neighbours (ids i and i + 1..3) the scatter writes lanes in order, lowest first,
// and ids ascend within a bucket (BuildIndex), so the lane that owns a counter writes it last.
// Lanes past the list's end are masked out of the gather, the scatter and the hits. Other
// targets: the scalar loop, which sets the hit's bit at once.
template <int kK, int kL, int kAhead>
HWY_INLINE std::size_t CountHead(const IndexView &ix, const uint16_t *HWY_RESTRICT qc,
                                 uint32_t base, uint32_t t, uint8_t *HWY_RESTRICT counters,
                                 uint64_t *HWY_RESTRICT bits, uint32_t *HWY_RESTRICT hits) {
  std::size_t n_hits = 0;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  (void)bits;
  const hn::ScalableTag<uint32_t> du;
  const hn::RebindToSigned<decltype(du)> di;
  const hn::Rebind<uint16_t, decltype(du)> d16;
  const std::size_t N = hn::Lanes(du);
  const auto vbase = hn::Set(du, base), vt = hn::Set(du, base + t), one = hn::Set(du, 1u);
  const auto vsat = hn::Set(du, base + t + 1);
  const auto low = hn::Set(du, 0xFFu), high = hn::Set(du, 0xFFFFFF00u);
  WalkIndex<kK, kL, kAhead>(
      ix, qc, [&](std::size_t s, const uint16_t *ids, uint32_t lo, uint32_t hi) {
        // ids are relative to the segment
        uint8_t *HWY_RESTRICT cw = counters + s * kSegment;
        const auto seg = hn::Set(du, uint32_t(s * kSegment));
        for (uint32_t j = lo; j < hi; j += uint32_t(N)) {
          const std::size_t n = std::min<std::size_t>(N, hi - j);
          // A masked load: the last list of the index may end at the end of its allocation.
          const auto id = hn::PromoteTo(du, hn::MaskedLoad(hn::FirstN(d16, n), d16, ids + j));
          const auto valid = hn::FirstN(du, n);
          const auto offset = hn::BitCast(di, id); // bytes
          // Masked gather and scatter (Highway 1.0.3 has neither): lanes past the list's end cost
          // nothing, where unmasked ones repeating the last entry took a full 16-lane scatter.
          const auto word = decltype(id){
              _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid.raw, offset.raw, cw, 1)};
          // base + this head's count after the entry, saturated at base + t + 1
          const auto now = hn::Min(hn::Add(hn::Max(hn::And(word, low), vbase), one), vsat);
          _mm512_mask_i32scatter_epi32(cw, valid.raw, offset.raw,
                                       hn::Or(hn::And(word, high), now).raw, 1);
          const auto hit = hn::And(valid, hn::Eq(now, vt));
          hn::StoreU(hn::Compress(hn::Add(id, seg), hit), du, hits + n_hits); // hits has N slack
          n_hits += hn::CountTrue(du, hit);
        }
      });
#else
  (void)hits;
  WalkIndex<kK, kL, kAhead>(
      ix, qc, [&](std::size_t s, const uint16_t *ids, uint32_t lo, uint32_t hi) {
        uint8_t *HWY_RESTRICT c = counters + s * kSegment; // ids are relative to the segment
        const std::size_t s0 = s * kSegment;
        for (uint32_t j = lo; j < hi; ++j) {
          const uint32_t id = ids[j];
          // max(v - base, 0) without a branch: written as v > base ? v : base, GCC emits a jump
          // that mispredicts on every second collision of a token.
          const int32_t dv = int32_t(c[id]) - int32_t(base);
          const uint32_t was = uint32_t(dv & ~(dv >> 31)); // this head's count before the entry
          const uint32_t now = was + uint32_t(was <= t);   // after it, saturated at t + 1
          c[id] = uint8_t(base + now);
          const std::size_t g = s0 + id;
          bits[g / 64] |= uint64_t(now == t) << (g % 64); // only the entry from t - 1 gives t
        }
      });
#endif
  return n_hits;
}

// The ≥ t rule for t > kMaxEpochT (L >= 255 tables): plain 16-bit counts of this head, cleared
// per head, with the hit's bit set when a count reaches t. Outside the fast path on purpose; it
// keeps every valid (K, L, t) served.
template <int kK, int kL, int kAhead>
HWY_INLINE void CountHeadWide(const IndexView &ix, const uint16_t *HWY_RESTRICT qc, uint32_t t,
                              uint64_t *HWY_RESTRICT bits) {
  thread_local std::vector<uint16_t> count;
  count.assign(ix.count, 0);
  WalkIndex<kK, kL, kAhead>(ix, qc,
                            [&](std::size_t s, const uint16_t *ids, uint32_t lo, uint32_t hi) {
                              for (uint32_t j = lo; j < hi; ++j) {
                                const std::size_t g = s * kSegment + ids[j];
                                if (++count[g] == t)
                                  bits[g / 64] |= uint64_t(1) << (g % 64);
                              }
                            });
}

// The union of G hit bitsets (head h's at bits + h * stride, `words` words each) in ascending
// order: tokens[i] = begin + position, and with masks, masks[i] = the bit mask of the heads whose
// set holds it (bit h = head h). Clears the bitsets as it reads them, adds each head's count to
// per_head[h], and returns the union's size. Writes nothing past the union (masked stores).
//
// AVX-512: per 64-bit word, the set positions are compressed out of an index vector and the
// heads' mask bytes out of a vector built from their words, with no branch per token. The scalar
// loop (one tzcnt, G shifts and a data-dependent loop exit per token) cost ~50 us per GQA-3 step
// at n = 128k, more than a third of its three walks (harness on cached data, Xeon).
HWY_INLINE std::size_t UnionOfBitsets(uint64_t *HWY_RESTRICT bits, std::size_t stride,
                                      std::size_t words, int G, uint32_t begin,
                                      uint32_t *HWY_RESTRICT tokens, uint8_t *HWY_RESTRICT masks,
                                      std::size_t *HWY_RESTRICT per_head) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  alignas(64) static constexpr uint8_t kIota[64] = {
      0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
      22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43,
      44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};
  const __m512i iota8 = _mm512_load_si512(kIota);
  const __m512i iota32 = _mm512_cvtepu8_epi32(_mm512_castsi512_si128(iota8));
  auto first = [](unsigned k) { return __mmask16(k >= 16 ? 0xFFFFu : (1u << k) - 1u); };
#endif
  std::size_t n = 0;
  for (std::size_t w = 0; w < words; ++w) {
    uint64_t hb[kMaxGroup];
    uint64_t any = 0;
    for (int h = 0; h < G; ++h) {
      hb[h] = bits[std::size_t(h) * stride + w];
      any |= hb[h];
    }
    if (!any)
      continue;
    for (int h = 0; h < G; ++h) {
      bits[std::size_t(h) * stride + w] = 0;
      per_head[h] += std::size_t(hwy::PopCount(hb[h]));
    }
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    const unsigned cnt = unsigned(hwy::PopCount(any));
    const __m512i base = _mm512_set1_epi32(int32_t(begin + uint32_t(w * 64)));
#if HWY_TARGET <= HWY_AVX3_DL
    // VBMI2: one byte compress gives every position and every mask of the word.
    if (masks) {
      __m512i mv = _mm512_maskz_mov_epi8(hb[0], _mm512_set1_epi8(1));
      for (int h = 1; h < G; ++h)
        mv = _mm512_or_si512(mv, _mm512_maskz_mov_epi8(hb[h], _mm512_set1_epi8(char(1 << h))));
      _mm512_mask_storeu_epi8(masks + n, cnt >= 64 ? ~uint64_t(0) : (uint64_t(1) << cnt) - 1,
                              _mm512_maskz_compress_epi8(any, mv));
    }
    __m512i pos = _mm512_maskz_compress_epi8(any, iota8);
    for (unsigned c = 0; c < cnt; c += 16) { // once for all but words of > 16 tokens
      const __m512i t32 = _mm512_add_epi32(_mm512_cvtepu8_epi32(_mm512_castsi512_si128(pos)), base);
      _mm512_mask_storeu_epi32(tokens + n + c, first(cnt - c), t32);
      pos = _mm512_alignr_epi32(pos, pos, 4); // the next 16 positions to the bottom
    }
#else
    // AVX3: 32-bit compresses, 16 positions at a time.
    for (unsigned c = 0, o = 0; c < 64; c += 16) {
      const __mmask16 m = __mmask16(any >> c);
      const unsigned k = unsigned(_mm_popcnt_u32(m));
      const __m512i pos = _mm512_add_epi32(iota32, _mm512_set1_epi32(int32_t(c)));
      _mm512_mask_storeu_epi32(tokens + n + o, first(k),
                               _mm512_maskz_compress_epi32(m, _mm512_add_epi32(pos, base)));
      if (masks) {
        __m512i mv = _mm512_maskz_mov_epi32(__mmask16(hb[0] >> c), _mm512_set1_epi32(1));
        for (int h = 1; h < G; ++h)
          mv = _mm512_or_si512(
              mv, _mm512_maskz_mov_epi32(__mmask16(hb[h] >> c), _mm512_set1_epi32(1 << h)));
        _mm512_mask_cvtepi32_storeu_epi8(masks + n + o, first(k),
                                         _mm512_maskz_compress_epi32(m, mv));
      }
      o += k;
    }
#endif
    n += cnt;
#else
    const uint32_t t0 = begin + uint32_t(w * 64);
    while (any) {
      const std::size_t b = hwy::Num0BitsBelowLS1Bit_Nonzero64(any);
      any &= any - 1;
      uint32_t m = 0;
      for (int h = 0; h < G; ++h)
        m |= uint32_t((hb[h] >> b) & 1u) << h;
      tokens[n] = t0 + uint32_t(b);
      if (masks)
        masks[n] = uint8_t(m);
      ++n;
    }
#endif
  }
  return n;
}

template <int kK, int kL, int kAhead> void Retrieve(const RetrieveArgs &a) {
  const IndexView &ix = a.index;
  const std::size_t L = Pick<kL>(std::size_t(ix.L));
  Pick<kK>(std::size_t(ix.K));
  HWY_ASSERT(a.G >= 1 && a.G <= kMaxGroup && a.t >= 1 && a.t <= int(L));
  const std::size_t words = (ix.count + 63) / 64;
  HWY_ASSERT(a.state.words >= words && a.state.capacity >= ix.count);
  const uint32_t t = uint32_t(a.t);
  thread_local std::vector<uint32_t> hits;
  const std::size_t hits_needed = ix.count + hn::Lanes(hn::ScalableTag<uint32_t>());
  if (hits.size() < hits_needed) // grow only: a token is a hit once per head, plus a vector
    hits.resize(hits_needed);
  for (int h = 0; h < a.G; ++h) {
    uint64_t *HWY_RESTRICT bits = a.state.bits + std::size_t(h) * a.state.words;
    if (a.t > kMaxEpochT) {
      CountHeadWide<kK, kL, kAhead>(ix, a.query_codes + h * L, t, bits);
      continue;
    }
    // A head's counters saturate at base + t + 1: its values stay within [base, base + t + 1].
    uint32_t base = *a.state.epoch;
    if (base + t + 1 > 0xFFu) { // epoch space exhausted: one clear every ~255 / (t + 1) heads
      // All of them, not only this index's: the scratch serves indexes of different sizes, and
      // a counter past this count left at a high epoch would read as a count for a larger one.
      std::memset(a.state.counters, 0, a.state.capacity);
      base = 0;
    }
    *a.state.epoch = base + t + 1;
    const std::size_t n_hits = CountHead<kK, kL, kAhead>(ix, a.query_codes + h * L, base, t,
                                                         a.state.counters, bits, hits.data());
    for (std::size_t i = 0; i < n_hits; ++i) // hits of the vector walk (none on other targets)
      bits[hits[i] / 64] |= uint64_t(1) << (hits[i] % 64);
  }
  std::size_t per_head[kMaxGroup] = {};
  const std::size_t n = UnionOfBitsets(a.state.bits, a.state.words, words, a.G, uint32_t(ix.begin),
                                       a.tokens, a.masks, per_head);
  *a.count = n;
  if (a.per_head)
    for (int h = 0; h < a.G; ++h)
      a.per_head[h] = per_head[h];
}

// ================================ attention =====================================================

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
HWY_INLINE void DenseRange(Heads &st, const Row *k, const Row *v, std::size_t begin,
                           std::size_t end) {
  const std::size_t d = kD ? std::size_t(kD) : st.d;
  constexpr std::size_t kBlock = std::size_t(kS.block);
  constexpr std::size_t kAhead = std::size_t(kS.dense_prefetch);
  alignas(64) float z[kG * kBlock];
  const Row *krows[kBlock];
  const Row *vrows[kBlock];
  const Row *pf_k[kBlock], *pf_v[kBlock];
  for (std::size_t i0 = begin; i0 < end; i0 += kBlock) {
    const std::size_t nb = std::min(kBlock, end - i0);
    for (std::size_t i = 0; i < nb; ++i) {
      krows[i] = sd::RowAt(k, i0 + i, d);
      vrows[i] = sd::RowAt(v, i0 + i, d);
      const std::size_t f = i0 + i + kAhead;
      pf_k[i] = kAhead > 0 && f < end ? sd::RowAt(k, f, d) : nullptr;
      pf_v[i] = kAhead > 0 && f < end ? sd::RowAt(v, f, d) : nullptr;
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
  const Row *k = static_cast<const Row *>(a.k);
  const Row *v = static_cast<const Row *>(a.v);
  alignas(64) float z[kG * kBlock], c[kG * kBlock], nn[kBlock];
  const Row *krows[kBlock], *vrows[kBlock], *pf_k[kBlock], *pf_v[kBlock];
  const std::size_t row_bytes = sd::RowBytes<Row>(d);
  for (std::size_t i = 0; i < std::min(kPrefetchRows, a.count); ++i) {
    sd::PrefetchRow(sd::RowAt(k, a.tokens[i], d), row_bytes);
    sd::PrefetchRow(sd::RowAt(v, a.tokens[i], d), row_bytes);
  }
  for (std::size_t i0 = 0; i0 < a.count; i0 += kBlock) {
    const std::size_t nb = std::min(kBlock, a.count - i0);
    for (std::size_t i = 0; i < nb; ++i) {
      krows[i] = sd::RowAt(k, a.tokens[i0 + i], d);
      vrows[i] = sd::RowAt(v, a.tokens[i0 + i], d);
      const std::size_t f = i0 + i + kPrefetchRows;
      pf_k[i] = kPrefetchRows > 0 && f < a.count ? sd::RowAt(k, a.tokens[f], d) : nullptr;
      pf_v[i] = kPrefetchRows > 0 && f < a.count ? sd::RowAt(v, a.tokens[f], d) : nullptr;
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
  DenseRange<kG, kD, Row, kS>(st, static_cast<const Row *>(a.k), static_cast<const Row *>(a.v),
                              a.begin, a.end);
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
  const Row *k = static_cast<const Row *>(a.k);
  const Row *v = static_cast<const Row *>(a.v);
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

// ================================ entry points ==================================================

// Queries are f32 and keys are of the set's dtype, so encode serves both whatever T is.
template <int kK, int kL, int kD, typename T> void Encode(const EncodeArgs &a) {
  if (a.dtype == DType::f32)
    EncodeTyped<kK, kL, kD, float>(a);
  else if (a.dtype == DType::q8)
    EncodeTyped<kK, kL, kD, Q8>(a);
  else
    EncodeTyped<kK, kL, kD, uint16_t>(a);
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

// The kernel set of this target for one configuration (all zeros and void: the generic set) and
// one schedule (lsh_schedule.h; the default unless given).
template <int kK, int kL, int kD, typename T, Schedule kS = Schedule{}>
LshKernelSet MakeKernelSet() {
  static_assert(kD % 2 == 0, "head dimension must be even");
  static_assert(!std::is_same_v<T, Q8> || kD % 32 == 0, "q8 rows need d a multiple of 32");
  static_assert(kK >= 0 && kK <= 16 && kL >= 0 && kL <= 1024, "K in [1, 16], L in [1, 1024]");
  static_assert(kS.block == 16 || kS.block == 32 || kS.block == 64 || kS.block == 128,
                "schedule: block must be 16, 32, 64 or 128");
  static_assert(kS.prefetch >= 0 && kS.dense_prefetch >= 0 && kS.tables_ahead >= 0,
                "schedule: prefetch distances must be >= 0");
  LshKernelSet s;
  s.specialised = kK != 0 && kL != 0 && kD != 0 && !std::is_void_v<T>;
  if (s.specialised)
    s.key = KernelKey{kK, kL, kD, DTypeOf<T>(), Target::cpu};
  s.key.schedule = kS;
  s.simd_target = hwy::TargetName(HWY_TARGET);
  s.encode = &Encode<kK, kL, kD, T>;
  s.build_index = &BuildIndex<kK, kL>;
  s.retrieve = &Retrieve<kK, kL, kS.tables_ahead>;
  s.sampled_attention = &SampledAttention<kD, T, ForSampled(kS)>;
  s.dense_attention = &DenseAttention<kD, T, ForDense(kS)>;
  s.merge = &Merge<kD>;
  return s;
}

} // namespace pig::runtime::lsh::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif // PIG_RUNTIME_KERNELS_LSH_INL_H_ toggle
