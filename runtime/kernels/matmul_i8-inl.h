// The integer weight kernels (Highway, compiled once per target through foreach_target.h by
// ops.cpp, beside it): activations quantised per 32-element block to two int8 codes an element
// (hi and a residual lo: int16's precision, see QuantizeI8Scalar), multiplied with the weight
// blocks' own codes by 8-bit multiply-adds, each weight block read once for every activation row
// of a step.
//
// Arithmetic of one (weight row, activation row) pair, the same whatever other rows it is
// computed with:
//   * per 32-element block b, the integer dot 256 <u_b, hi_b> + <u_b, lo_b> of unsigned weight
//     bytes and signed activation bytes, exact in int32 (|u| <= 255, |s| <= 127, 32 terms). Weight
//     codes that are signed (Q8_0, Q6_K minus its offset 32) go in as |w| against the activation
//     negated where w < 0; Q4 nibbles go in as they are (0..15) and their offset (Q4_0's 8) or
//     minimum (Q4_1, Q4_K) is a float term on the block's exact float sum;
//   * blocks go in pairs (64 elements, one 512-bit vector or two 256-bit ones): the int32 lanes
//     are converted to float, multiplied by the activation scales (expanded per lane) and added
//     into one float accumulator with the weight scales by one fused multiply-add per lane;
//   * at the end the accumulator's lanes are summed in a fixed order and the float bias added.
// So a row's bits depend on its own data and the CPU's target, never on how many rows share the
// call (kernels_test checks it bit for bit on every target).
//
// Instructions: AVX3_DL (AVX-512 VNNI) vpdpbusd on 512 bits; AVX3 (AVX-512BW) and AVX2
// vpmaddubsw + vpmaddwd (which cannot saturate here: 2 x 128 x 127 < 32767); other targets a
// portable scalar loop with the same integers.

#if defined(PIG_RUNTIME_KERNELS_MATMUL_I8_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PIG_RUNTIME_KERNELS_MATMUL_I8_INL_H_
#undef PIG_RUNTIME_KERNELS_MATMUL_I8_INL_H_
#else
#define PIG_RUNTIME_KERNELS_MATMUL_I8_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#if HWY_ARCH_X86
#include <immintrin.h>
#endif
#include "pig/runtime/ggml_types.h"
#include "pig/runtime/ops.h"

HWY_BEFORE_NAMESPACE();
namespace pig::runtime::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---- Activations: int8 per 32-element block ----

// Reference of QuantizeI8Impl (also its fallback). A block of 32 becomes two int8 codes per
// element: with d = max|x| / 127, hi = round(x / d) and lo = round((x - hi d) 256 / d), both in
// [-127, 127], so x ~ (d / 256) (256 hi + lo) to within d / 512 (about 2^-16 of the block's
// largest element, the precision of int16); scale = d / 256, sum the exact float sum of the block.
// A row of n elements is n hi codes, then n lo codes. A block holding a NaN or an infinity (its
// sum is not finite) gets a NaN scale and zero codes, so every product with it is NaN, as in f32.
HWY_INLINE void QuantizeI8Scalar(const float *HWY_RESTRICT x, size_t n, int8_t *HWY_RESTRICT xq,
                                 float *HWY_RESTRICT scale, float *HWY_RESTRICT sum) {
  for (size_t b = 0; b < n / 32; ++b) {
    const float *xb = x + 32 * b;
    float amax = 0, s = 0;
    for (size_t j = 0; j < 32; ++j) {
      amax = std::max(amax, std::abs(xb[j]));
      s += xb[j];
    }
    const float d = amax / 127.0f;
    const float inv = d > 0 ? 1.0f / d : 0.0f;
    const bool finite = std::isfinite(s);
    for (size_t j = 0; j < 32; ++j) {
      const float hi = finite ? std::nearbyint(xb[j] * inv) : 0.0f;
      const float r = finite ? std::nearbyint((xb[j] - hi * d) * (256.0f * inv)) : 0.0f;
      xq[32 * b + j] = int8_t(std::clamp(hi, -127.0f, 127.0f));
      xq[n + 32 * b + j] = int8_t(std::clamp(r, -127.0f, 127.0f));
    }
    scale[b] = finite ? d / 256.0f : std::numeric_limits<float>::quiet_NaN();
    sum[b] = s;
  }
}

HWY_INLINE void QuantizeI8Impl(const float *HWY_RESTRICT x, size_t n, int8_t *HWY_RESTRICT xq,
                               float *HWY_RESTRICT scale, float *HWY_RESTRICT sum) {
  using DF = hn::ScalableTag<float>;
  const DF df;
  const size_t N = hn::Lanes(df);
  if (N > 32) { // a block must be a whole number of vectors
    QuantizeI8Scalar(x, n, xq, scale, sum);
    return;
  }
  const hn::Rebind<int32_t, DF> di;
  const hn::Rebind<int8_t, DF> d8;
  const auto lo127 = hn::Set(di, -127), hi127 = hn::Set(di, 127);
  for (size_t b = 0; b < n / 32; ++b) {
    const float *xb = x + 32 * b;
    auto vmax = hn::Zero(df), vsum = hn::Zero(df);
    for (size_t j = 0; j < 32; j += N) {
      const auto v = hn::LoadU(df, xb + j);
      vmax = hn::Max(vmax, hn::Abs(v));
      vsum = hn::Add(vsum, v);
    }
    const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    const float s = hn::GetLane(hn::SumOfLanes(df, vsum));
    const float d = amax / 127.0f;
    const bool finite = std::isfinite(s);
    if (!finite) {
      std::memset(xq + 32 * b, 0, 32);
      std::memset(xq + n + 32 * b, 0, 32);
    } else {
      const float inv = d > 0 ? 1.0f / d : 0.0f;
      const auto vinv = hn::Set(df, inv), vd = hn::Set(df, d), vinv256 = hn::Set(df, 256.0f * inv);
      for (size_t j = 0; j < 32; j += N) {
        const auto v = hn::LoadU(df, xb + j);
        const auto hi = hn::NearestInt(hn::Mul(v, vinv));
        const auto r = hn::Sub(v, hn::Mul(hn::ConvertTo(df, hi), vd));
        const auto lo = hn::NearestInt(hn::Mul(r, vinv256));
        hn::StoreU(hn::DemoteTo(d8, hn::Min(hn::Max(hi, lo127), hi127)), d8, xq + 32 * b + j);
        hn::StoreU(hn::DemoteTo(d8, hn::Min(hn::Max(lo, lo127), hi127)), d8, xq + n + 32 * b + j);
      }
    }
    scale[b] = finite ? d / 256.0f : std::numeric_limits<float>::quiet_NaN();
    sum[b] = s;
  }
}

// ---- Weight blocks ----

// Block kinds of the integer path.
enum class QKind { kQ4_0, kQ4_1, kQ8_0, kQ4_K, kQ6_K };

template <QKind kKind> constexpr size_t QBlockBytes() {
  return kKind == QKind::kQ4_0   ? sizeof(BlockQ4_0)
         : kKind == QKind::kQ4_1 ? sizeof(BlockQ4_1)
         : kKind == QKind::kQ8_0 ? sizeof(BlockQ8_0)
         : kKind == QKind::kQ4_K ? sizeof(BlockQ4_K)
                                 : sizeof(BlockQ6_K);
}

// One f16 scale of a block -> f32: F16C (vcvtph2ps) where the target has it (AVX2 and up),
// otherwise the integer fast path.
HWY_INLINE float BlockF16(const uint8_t *p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  return _cvtsh_ss(h);
#else
  return F16ToF32Fast(h);
#endif
}

// The 6-bit scales and minima of a Q4_K super-block's 8 sub-blocks, times d and dmin.
HWY_INLINE void Q4KScales(const uint8_t *blk, float *ds, float *dm) {
  const float d = BlockF16(blk), dmin = BlockF16(blk + 2);
  const uint8_t *scales = blk + 4;
  for (int j = 0; j < 8; ++j) {
    const int sc = j < 4 ? scales[j] & 63 : (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
    const int m = j < 4 ? scales[j + 4] & 63 : (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
    ds[j] = d * float(sc);
    dm[j] = dmin * float(m);
  }
}

#undef PIG_I8_SIMD // both set per target (this file is compiled once per target)
#undef PIG_I8_PACKED
#if HWY_ARCH_X86 && (HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL)
#define PIG_I8_SIMD 1
// GCC 12 warns about the _mm512_undefined_* inside its own AVX-512 intrinsics (a known false
// positive); the warning is silenced for this file's intrinsics only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// ---- 64 bytes (a block pair) as one 512-bit vector, or two 256-bit ones on AVX2 ----
#if HWY_TARGET == HWY_AVX2
struct I8x64 {
  __m256i a, b;
};
struct F32x16 {
  __m256 a, b;
};
using SignOf = I8x64; // the signed weights themselves (vpsignb)
#else
struct I8x64 {
  __m512i v;
};
struct F32x16 {
  __m512 v;
};
using SignOf = __mmask64; // lanes whose weight is negative
#endif

#if HWY_TARGET == HWY_AVX3_DL
// acc + the products of u's unsigned and s's signed bytes, four to an int32 lane. Inline
// assembly: Highway 1.0.3's AVX3_DL target enables avxvnni but not avx512vnni, so the intrinsic
// does not compile there; a 512-bit vpdpbusd has only the EVEX (AVX512_VNNI) form.
HWY_INLINE __m512i Dpbusd(__m512i acc, __m512i u, __m512i s) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
}
#endif

HWY_INLINE I8x64 LoadI8(const int8_t *p, bool two) { // two blocks, or one and zeros
#if HWY_TARGET == HWY_AVX2
  return {_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)),
          two ? _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + 32))
              : _mm256_setzero_si256()};
#else
  return {two ? _mm512_loadu_si512(p)
              : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)))};
#endif
}

HWY_INLINE F32x16 LoadF(const float *p) {
#if HWY_TARGET == HWY_AVX2
  return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
#else
  return {_mm512_loadu_ps(p)};
#endif
}

HWY_INLINE F32x16 ZeroF() {
#if HWY_TARGET == HWY_AVX2
  return {_mm256_setzero_ps(), _mm256_setzero_ps()};
#else
  return {_mm512_setzero_ps()};
#endif
}

// [s0 x 8, s1 x 8]: one scale per block of the pair.
HWY_INLINE F32x16 Scales2(float s0, float s1) {
#if HWY_TARGET == HWY_AVX2
  return {_mm256_set1_ps(s0), _mm256_set1_ps(s1)};
#else
  return {_mm512_insertf32x8(_mm512_set1_ps(s0), _mm256_set1_ps(s1), 1)};
#endif
}

// d x [sc[0] x 4, sc[1] x 4, sc[2] x 4, sc[3] x 4]: one scale per 16 elements (Q6_K).
HWY_INLINE F32x16 Scales4(const int8_t *sc, float d) {
  int32_t four;
  std::memcpy(&four, sc, 4);
  const __m128i s = _mm_cvtepi8_epi32(_mm_cvtsi32_si128(four));
#if HWY_TARGET == HWY_AVX2
  const __m256i w = _mm256_castsi128_si256(s);
  const __m256 vd = _mm256_set1_ps(d);
  return {_mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_permutevar8x32_epi32(
                                w, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1)))),
          _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_permutevar8x32_epi32(
                                w, _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3))))};
#else
  const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  return {_mm512_mul_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(
                                               idx, _mm512_castsi128_si512(s))))};
#endif
}

// acc + (int32 lanes of 256 <u, s_hi> + <u, s_lo>, four bytes a lane, converted) * x * w: the
// per-pair update.
HWY_INLINE F32x16 DotScaleAdd(const I8x64 &u, const I8x64 &s_hi, const I8x64 &s_lo, const F32x16 &x,
                              const F32x16 &w, F32x16 acc) {
#if HWY_TARGET == HWY_AVX2
  const __m256i ones = _mm256_set1_epi16(1);
  auto dot = [&](__m256i a, __m256i b) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones);
  };
  const __m256i ia = _mm256_add_epi32(_mm256_slli_epi32(dot(u.a, s_hi.a), 8), dot(u.a, s_lo.a));
  const __m256i ib = _mm256_add_epi32(_mm256_slli_epi32(dot(u.b, s_hi.b), 8), dot(u.b, s_lo.b));
  return {_mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(ia), x.a), w.a, acc.a),
          _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(ib), x.b), w.b, acc.b)};
#else
#if HWY_TARGET == HWY_AVX3_DL
  const __m512i hi = Dpbusd(_mm512_setzero_si512(), u.v, s_hi.v);
  const __m512i lo = Dpbusd(_mm512_setzero_si512(), u.v, s_lo.v);
#else
  const __m512i ones = _mm512_set1_epi16(1);
  const __m512i hi = _mm512_madd_epi16(_mm512_maddubs_epi16(u.v, s_hi.v), ones);
  const __m512i lo = _mm512_madd_epi16(_mm512_maddubs_epi16(u.v, s_lo.v), ones);
#endif
  const __m512i i = _mm512_add_epi32(_mm512_slli_epi32(hi, 8), lo);
  return {_mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(i), x.v), w.v, acc.v)};
#endif
}

// The lanes' sum in a fixed order.
HWY_INLINE float SumLanes(const F32x16 &v) {
#if HWY_TARGET == HWY_AVX2
  const __m256 s = _mm256_add_ps(v.a, v.b);
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
#else
  const __m256 s =
      _mm256_add_ps(_mm512_castps512_ps256(v.v),
                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v.v), 1)));
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
#endif
}

// Signed weight bytes w -> (|w| as unsigned bytes, what ApplySign needs).
HWY_INLINE void SplitSign(const I8x64 &w, I8x64 *u, SignOf *sign) {
#if HWY_TARGET == HWY_AVX2
  *u = {_mm256_sign_epi8(w.a, w.a), _mm256_sign_epi8(w.b, w.b)}; // -128 -> 0x80 = 128
  *sign = w;
#else
  *u = {_mm512_abs_epi8(w.v)};
  *sign = _mm512_movepi8_mask(w.v);
#endif
}

// The activation bytes negated where the weight is negative (zeroed where it is zero on AVX2:
// those products are zero either way).
HWY_INLINE I8x64 ApplySign(const I8x64 &s, const SignOf &sign) {
#if HWY_TARGET == HWY_AVX2
  return {_mm256_sign_epi8(s.a, sign.a), _mm256_sign_epi8(s.b, sign.b)};
#else
  return {_mm512_mask_sub_epi8(s.v, sign, _mm512_setzero_si512(), s.v)};
#endif
}

// Q4_0 / Q4_1: two blocks' 16 bytes of nibbles (the second may be absent) -> 64 codes in element
// order: block 0 low nibbles, block 0 high, block 1 low, block 1 high.
HWY_INLINE I8x64 Q4Pair(const uint8_t *qs0, const uint8_t *qs1) {
  const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(qs0));
  const __m128i q1 =
      qs1 ? _mm_loadu_si128(reinterpret_cast<const __m128i *>(qs1)) : _mm_setzero_si128();
#if HWY_TARGET == HWY_AVX2
  const __m256i m = _mm256_set1_epi8(0x0F);
  return {_mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q0, 4), q0), m),
          _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q1, 4), q1), m)};
#else
  const __m256i lo = _mm256_set_m128i(q1, q0);
  const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_srli_epi16(lo, 4), 1);
  // [q0, q1, q0 >> 4, q1 >> 4] -> [q0, q0 >> 4, q1, q1 >> 4]
  return {_mm512_and_si512(_mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0)),
                           _mm512_set1_epi8(0x0F))};
#endif
}

// Q4_K: 32 bytes of nibbles -> sub-block 2j (low nibbles) then 2j + 1 (high nibbles).
HWY_INLINE I8x64 Q4KPair(const uint8_t *qs) {
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(qs));
#if HWY_TARGET == HWY_AVX2
  const __m256i m = _mm256_set1_epi8(0x0F);
  return {_mm256_and_si256(q, m), _mm256_and_si256(_mm256_srli_epi16(q, 4), m)};
#else
  return {
      _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1),
                       _mm512_set1_epi8(0x0F))};
#endif
}

// Q8_0: two blocks' 32 signed codes (the second may be absent: zeros).
HWY_INLINE I8x64 Q8Pair(const uint8_t *qs0, const uint8_t *qs1) {
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(qs0));
  const __m256i b =
      qs1 ? _mm256_loadu_si256(reinterpret_cast<const __m256i *>(qs1)) : _mm256_setzero_si256();
#if HWY_TARGET == HWY_AVX2
  return {a, b};
#else
  return {_mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1)};
#endif
}

// Q6_K: activation blocks 2j and 2j + 1 of a super-block (pair j: half j / 2, quarters q and
// q + 1 with q = 2 (j % 2)) as signed codes (6-bit code - 32).
HWY_INLINE I8x64 Q6KPair(const BlockQ6_K *blk, size_t j) {
  const size_t half = j / 2, q = 2 * (j % 2);
  const uint8_t *ql = blk->ql + 64 * half, *qh = blk->qh + 32 * half;
  __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(ql));
  __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(ql + 32));
  if (q >= 2) { // quarters 2 and 3 take the high nibbles
    l0 = _mm256_srli_epi16(l0, 4);
    l1 = _mm256_srli_epi16(l1, 4);
  }
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(qh));
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
  const __m128i s0 = _mm_cvtsi32_si128(int(2 * q)), s1 = _mm_cvtsi32_si128(int(2 * q + 2));
  const __m256i h0 = _mm256_and_si256(_mm256_srl_epi16(h, s0), m2);
  const __m256i h1 = _mm256_and_si256(_mm256_srl_epi16(h, s1), m2);
  const __m256i c0 =
      _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(h0, 4)), k32);
  const __m256i c1 =
      _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(h1, 4)), k32);
#if HWY_TARGET == HWY_AVX2
  return {c0, c1};
#else
  return {_mm512_inserti64x4(_mm512_castsi256_si512(c0), c1, 1)};
#endif
}

// One weight row against G activation rows (xq[g], their scales expanded 16 floats a pair in
// xs[g], their block sums in xsum[g]): out[g]. See the top of this file for the arithmetic.
template <QKind kKind, size_t G>
HWY_INLINE void RowI8(const uint8_t *HWY_RESTRICT row, size_t nb, size_t cols,
                      const int8_t *const *HWY_RESTRICT xq, const float *const *HWY_RESTRICT xs,
                      const float *const *HWY_RESTRICT xsum, float *HWY_RESTRICT out) {
  F32x16 acc[G];
  float bias[G];
  for (size_t g = 0; g < G; ++g) {
    acc[g] = ZeroF();
    bias[g] = 0.0f;
  }
  // Pair p (blocks 2p, 2p + 1; `two` false for a lone last block) of unsigned codes u (with the
  // weights' signs for Q8_0 / Q6_K) and weight scales w.
  auto add = [&](size_t p, bool two, const I8x64 &u, const SignOf *sign, const F32x16 &w) {
    for (size_t g = 0; g < G; ++g) {
      I8x64 hi = LoadI8(xq[g] + 64 * p, two), lo = LoadI8(xq[g] + cols + 64 * p, two);
      if (sign) {
        hi = ApplySign(hi, *sign);
        lo = ApplySign(lo, *sign);
      }
      acc[g] = DotScaleAdd(u, hi, lo, LoadF(xs[g] + 16 * p), w, acc[g]);
    }
  };
  if constexpr (kKind == QKind::kQ4_K) {
    for (size_t sb = 0; sb < nb / 8; ++sb) {
      const uint8_t *blk = row + sb * sizeof(BlockQ4_K);
      float ds[8], dm[8];
      Q4KScales(blk, ds, dm);
      for (size_t j = 0; j < 4; ++j) {
        const size_t p = 4 * sb + j, b = 2 * p;
        add(p, true, Q4KPair(blk + 16 + 32 * j), nullptr, Scales2(ds[2 * j], ds[2 * j + 1]));
        for (size_t g = 0; g < G; ++g) { // one product a statement: contracted alike for any G
          bias[g] += dm[2 * j] * xsum[g][b];
          bias[g] += dm[2 * j + 1] * xsum[g][b + 1];
        }
      }
    }
    for (size_t g = 0; g < G; ++g)
      out[g] = SumLanes(acc[g]) - bias[g];
  } else if constexpr (kKind == QKind::kQ6_K) {
    for (size_t sb = 0; sb < nb / 8; ++sb) {
      const auto *blk = reinterpret_cast<const BlockQ6_K *>(row + sb * sizeof(BlockQ6_K));
      const float d = BlockF16(reinterpret_cast<const uint8_t *>(&blk->d));
      for (size_t j = 0; j < 4; ++j) {
        I8x64 u;
        SignOf sign;
        SplitSign(Q6KPair(blk, j), &u, &sign);
        // Pair j: scales 8 half + 2 quarter .. + 3 (two per block, one per 16 elements).
        add(4 * sb + j, true, u, &sign, Scales4(blk->scales + 8 * (j / 2) + 4 * (j % 2), d));
      }
    }
    for (size_t g = 0; g < G; ++g)
      out[g] = SumLanes(acc[g]);
  } else {
    constexpr size_t kBytes = QBlockBytes<kKind>();
    constexpr size_t kQs = kKind == QKind::kQ4_1 ? 4 : 2;
    for (size_t p = 0; 2 * p < nb; ++p) {
      const size_t b = 2 * p;
      const bool two = b + 1 < nb;
      const uint8_t *blk0 = row + b * kBytes, *blk1 = two ? blk0 + kBytes : nullptr;
      const float d0 = BlockF16(blk0), d1 = two ? BlockF16(blk1) : 0.0f;
      const F32x16 w = Scales2(d0, d1);
      if constexpr (kKind == QKind::kQ8_0) {
        I8x64 u;
        SignOf sign;
        SplitSign(Q8Pair(blk0 + kQs, two ? blk1 + kQs : nullptr), &u, &sign);
        add(p, two, u, &sign, w);
      } else {
        add(p, two, Q4Pair(blk0 + kQs, two ? blk1 + kQs : nullptr), nullptr, w);
        // The offset (Q4_0: -8 d) or minimum (Q4_1: m) times the block's exact sum.
        const float m0 = kKind == QKind::kQ4_1 ? BlockF16(blk0 + 2) : d0;
        const float m1 = two ? (kKind == QKind::kQ4_1 ? BlockF16(blk1 + 2) : d1) : 0.0f;
        for (size_t g = 0; g < G; ++g) { // one product a statement: contracted alike for any G
          bias[g] += m0 * xsum[g][b];
          if (two)
            bias[g] += m1 * xsum[g][b + 1];
        }
      }
    }
    for (size_t g = 0; g < G; ++g)
      out[g] = SumLanes(acc[g]) + (kKind == QKind::kQ4_0 ? -8.0f * bias[g] : bias[g]);
  }
}

#if HWY_TARGET == HWY_AVX3_DL
#define PIG_I8_PACKED 1

// ---- The packed path (AVX-512 VNNI): 16 weight rows a vector, one lane a row ----
// A panel block (ops.h, PackRows16) holds, for 16 rows, the codes in 4-byte groups (group k of
// every row in one vector), so vpdpbusd against a broadcast group of activation bytes adds four
// products to each row's lane: after a block's groups each lane holds that row's whole integer
// dot, and one conversion and two fused multiply-adds apply the block's scales to 16 rows at
// once. Per activation row and block: dot = 256 <c, hi> + <c, lo>, acc += float(dot) * (d * d_x),
// then (Q4) acc += m * sum_x (Q4_0: m = -8 d); Q8_0's codes are stored plus 128, so
// dot - 128 * sum(256 hi + lo) first. A row's bits do not depend on the other rows of the call.
template <QKind kKind> constexpr size_t PackedCodeBytes() {
  return kKind == QKind::kQ8_0 ? 512 : 256;
}
template <QKind kKind> constexpr size_t PackedBytes() {
  return PackedCodeBytes<kKind>() + (kKind == QKind::kQ4_1 ? 64 : 32);
}

template <QKind kKind, size_t G>
HWY_INLINE void PanelI8(const uint8_t *HWY_RESTRICT panel, size_t nb, const int8_t *HWY_RESTRICT xq,
                        size_t cols, const float *HWY_RESTRICT xscale,
                        const float *HWY_RESTRICT xsum, const int32_t *HWY_RESTRICT xsum128,
                        __m512 *acc) {
  constexpr size_t kCode = PackedCodeBytes<kKind>(), kBytes = PackedBytes<kKind>();
  constexpr size_t kGroups = kCode / 64;
  for (size_t g = 0; g < G; ++g)
    acc[g] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t *blk = panel + b * kBytes;
    __m512i c[8];
    if constexpr (kKind == QKind::kQ8_0) {
      for (size_t k = 0; k < 8; ++k)
        c[k] = _mm512_loadu_si512(blk + 64 * k);
    } else {
      for (size_t k = 0; k < 4; ++k) { // low nibbles: elements 4k..; high: 16 + 4k..
        const __m512i v = _mm512_loadu_si512(blk + 64 * k);
        c[k] = _mm512_and_si512(v, m4);
        c[4 + k] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      }
    }
    const __m512 d =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + kCode)));
    __m512 m = _mm512_setzero_ps();
    if constexpr (kKind == QKind::kQ4_1)
      m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + kCode + 32)));
    else if constexpr (kKind == QKind::kQ4_0)
      m = _mm512_mul_ps(d, _mm512_set1_ps(-8.0f));
    for (size_t g = 0; g < G; ++g) {
      const int8_t *xh = xq + g * 2 * cols + 32 * b, *xl = xh + cols;
      __m512i hi = _mm512_setzero_si512(), lo = _mm512_setzero_si512();
      for (size_t k = 0; k < kGroups * (kKind == QKind::kQ8_0 ? 1 : 2); ++k) {
        const size_t off = kKind == QKind::kQ8_0 ? 4 * k : (k < 4 ? 4 * k : 16 + 4 * (k - 4));
        int32_t four_hi, four_lo;
        std::memcpy(&four_hi, xh + off, 4);
        std::memcpy(&four_lo, xl + off, 4);
        hi = Dpbusd(hi, c[k], _mm512_set1_epi32(four_hi));
        lo = Dpbusd(lo, c[k], _mm512_set1_epi32(four_lo));
      }
      __m512i i = _mm512_add_epi32(_mm512_slli_epi32(hi, 8), lo);
      if constexpr (kKind == QKind::kQ8_0)
        i = _mm512_sub_epi32(i, _mm512_set1_epi32(xsum128[g * nb + b]));
      acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i),
                               _mm512_mul_ps(d, _mm512_set1_ps(xscale[g * nb + b])), acc[g]);
      if constexpr (kKind != QKind::kQ8_0)
        acc[g] = _mm512_fmadd_ps(m, _mm512_set1_ps(xsum[g * nb + b]), acc[g]);
    }
  }
}

// y[t][r] for rows [row_begin, row_end) from the packed panels (w.packed), every activation row.
template <QKind kKind>
void MatMulPacked16(const WeightMatrix &w, const int8_t *xq, const float *xscale, const float *xsum,
                    size_t n_x, float *y, size_t y_stride, size_t row_begin, size_t row_end) {
  constexpr size_t kBytes = PackedBytes<kKind>(), kGroup = 8;
  const size_t cols = w.cols, nb = cols / 32, panel_bytes = nb * kBytes;
  thread_local std::vector<int32_t> sum128; // Q8_0: 128 x the sum of each block's codes
  if constexpr (kKind == QKind::kQ8_0) {
    if (sum128.size() < n_x * nb)
      sum128.resize(n_x * nb);
    for (size_t t = 0; t < n_x; ++t)
      for (size_t b = 0; b < nb; ++b) {
        int32_t s = 0;
        for (size_t j = 0; j < 32; ++j)
          s += 256 * xq[t * 2 * cols + 32 * b + j] + xq[t * 2 * cols + cols + 32 * b + j];
        sum128[t * nb + b] = 128 * s;
      }
  }
  for (size_t p = row_begin / 16; 16 * p < row_end; ++p) {
    const uint8_t *panel = w.packed + p * panel_bytes;
    // The next panel, ahead of its use (the hardware prefetcher stops at each 4 KiB page).
    if (16 * (p + 1) < row_end) {
      for (size_t off = 0; off < panel_bytes; off += 64)
        hwy::Prefetch(panel + panel_bytes + off);
    }
    const size_t lo = std::max(row_begin, 16 * p) - 16 * p;
    const size_t hi = std::min(row_end, 16 * p + 16) - 16 * p;
    const __mmask16 mask = __mmask16(((1u << hi) - 1) & ~((1u << lo) - 1));
    auto run = [&](size_t t, auto g) {
      constexpr size_t G = decltype(g)::value;
      __m512 acc[G];
      PanelI8<kKind, G>(panel, nb, xq + t * 2 * cols, cols, xscale + t * nb, xsum + t * nb,
                        kKind == QKind::kQ8_0 ? &sum128[t * nb] : nullptr, acc);
      for (size_t i = 0; i < G; ++i)
        _mm512_mask_storeu_ps(y + (t + i) * y_stride + 16 * p, mask, acc[i]);
    };
    size_t t = 0;
    for (; t + kGroup <= n_x; t += kGroup)
      run(t, std::integral_constant<size_t, kGroup>());
    if (t + 4 <= n_x) {
      run(t, std::integral_constant<size_t, 4>());
      t += 4;
    }
    if (t + 2 <= n_x) {
      run(t, std::integral_constant<size_t, 2>());
      t += 2;
    }
    if (t < n_x)
      run(t, std::integral_constant<size_t, 1>());
  }
}

#endif // AVX3_DL

#pragma GCC diagnostic pop
#endif // x86 SIMD targets

// The portable path: the same integers, a block at a time, scalar.
template <QKind kKind>
HWY_INLINE float RowI8Scalar(const uint8_t *HWY_RESTRICT row, size_t nb, size_t cols,
                             const int8_t *HWY_RESTRICT xq, const float *HWY_RESTRICT xscale,
                             const float *HWY_RESTRICT xsum) {
  float total = 0, bias = 0;
  float ds[8], dm[8]; // Q4_K: the current super-block's scales and minima
  for (size_t b = 0; b < nb; ++b) {
    // x[i] stands for the pair's combined code 256 hi + lo.
    const int8_t *xh = xq + 32 * b, *xl = xq + cols + 32 * b;
    auto x = [&](size_t i) { return 256 * int32_t(xh[i]) + xl[i]; };
    if constexpr (kKind == QKind::kQ4_K || kKind == QKind::kQ6_K) {
      const size_t sb = b / 8, k = b % 8;
      if constexpr (kKind == QKind::kQ4_K) {
        const uint8_t *blk = row + sb * sizeof(BlockQ4_K);
        if (k == 0)
          Q4KScales(blk, ds, dm);
        const uint8_t *qs = blk + 16 + 32 * (k / 2);
        int32_t dot = 0;
        for (size_t i = 0; i < 32; ++i)
          dot += int32_t(k % 2 ? qs[i] >> 4 : qs[i] & 0xF) * x(i);
        total += float(dot) * xscale[b] * ds[k];
        bias += dm[k] * xsum[b];
      } else {
        const auto *blk = reinterpret_cast<const BlockQ6_K *>(row + sb * sizeof(BlockQ6_K));
        const float d = BlockF16(reinterpret_cast<const uint8_t *>(&blk->d));
        const size_t half = k / 4, quarter = k % 4;
        const uint8_t *ql = blk->ql + 64 * half + 32 * (quarter & 1), *qh = blk->qh + 32 * half;
        const int8_t *sc = blk->scales + 8 * half + 2 * quarter;
        for (size_t h = 0; h < 2; ++h) {
          int32_t dot = 0;
          for (size_t i = 16 * h; i < 16 * h + 16; ++i) {
            const int lo = quarter < 2 ? ql[i] & 0xF : ql[i] >> 4;
            const int hi = (qh[i] >> (2 * quarter)) & 3;
            dot += ((lo | (hi << 4)) - 32) * x(i);
          }
          total += float(dot) * xscale[b] * (d * float(sc[h]));
        }
      }
    } else {
      constexpr size_t kBytes = QBlockBytes<kKind>();
      const uint8_t *blk = row + b * kBytes;
      const float d = BlockF16(blk);
      int32_t dot = 0;
      if constexpr (kKind == QKind::kQ8_0) {
        const int8_t *qs = reinterpret_cast<const int8_t *>(blk + 2);
        for (size_t i = 0; i < 32; ++i)
          dot += int32_t(qs[i]) * x(i);
      } else {
        const uint8_t *qs = blk + (kKind == QKind::kQ4_1 ? 4 : 2);
        for (size_t i = 0; i < 16; ++i)
          dot += int32_t(qs[i] & 0xF) * x(i) + int32_t(qs[i] >> 4) * x(i + 16);
        bias += (kKind == QKind::kQ4_1 ? BlockF16(blk + 2) : d) * xsum[b];
      }
      total += float(dot) * xscale[b] * d;
    }
  }
  if constexpr (kKind == QKind::kQ4_0)
    return total - 8.0f * bias;
  else if constexpr (kKind == QKind::kQ4_K)
    return total - bias;
  else
    return total + bias;
}

constexpr size_t kPrefetchBytes = 4096;

// y[t][r] for activation rows t in [0, n_x) and weight rows r in [row_begin, row_end). The weight
// rows go in sub-blocks of about kSubBytes (cache-resident), each multiplied with every activation
// row, kTile rows at a time, before the next is read; within a tile, RowI8 takes kGroup
// activation rows per weight row (the unpacked codes are shared, each row's arithmetic is its
// own).
template <QKind kKind>
void MatMulI8Kind(const WeightMatrix &w, const int8_t *xq, const float *xscale, const float *xsum,
                  size_t n_x, float *y, size_t y_stride, size_t row_begin, size_t row_end) {
  constexpr size_t kSubBytes = 16 << 10, kTile = 16;
  const size_t cols = w.cols, nb = cols / 32;
  const size_t sub = std::max<size_t>(1, kSubBytes / w.row_bytes);
#ifdef PIG_I8_SIMD
#if HWY_TARGET == HWY_AVX2
  constexpr size_t kGroup = 4; // 16 vector registers
#else
  constexpr size_t kGroup = 8;
#endif
  // The activation scales of a tile expanded to 16 lanes a block pair ([s0 x 8, s1 x 8]; a lone
  // last block pairs with 0).
  const size_t pairs = (nb + 1) / 2;
  thread_local std::vector<float> expanded;
  if (expanded.size() < kTile * pairs * 16)
    expanded.resize(kTile * pairs * 16);
#endif
#ifdef PIG_I8_SIMD
  size_t expanded_t0 = ~size_t(0);
#endif
  for (size_t s0 = row_begin; s0 < row_end; s0 += sub) {
    const size_t s1 = std::min(row_end, s0 + sub);
    for (size_t t0 = 0; t0 < n_x; t0 += kTile) {
      const size_t t1 = std::min(n_x, t0 + kTile);
#ifdef PIG_I8_SIMD
      if (t0 != expanded_t0) { // once per call for a single tile (decode)
        for (size_t t = t0; t < t1; ++t) {
          float *e = &expanded[(t - t0) * pairs * 16];
          for (size_t b = 0; b < 2 * pairs; ++b)
            std::fill(e + 8 * b, e + 8 * b + 8, b < nb ? xscale[t * nb + b] : 0.0f);
        }
        expanded_t0 = t0;
      }
#endif
      for (size_t r = s0; r < s1; ++r) {
        const uint8_t *row = w.data + r * w.row_bytes;
        // Software prefetch kPrefetchBytes ahead of the row being read, on its first pass: the
        // hardware prefetcher alone stops at every 4 KiB page of the mapped file (measured:
        // decode +25 %). Prefetches past the end of the matrix are harmless hints.
        if (t0 == 0) {
          for (size_t off = 0; off < w.row_bytes; off += 64)
            hwy::Prefetch(row + kPrefetchBytes + off);
        }
#ifdef PIG_I8_SIMD
        const int8_t *xp[kGroup];
        const float *sp[kGroup], *mp[kGroup];
        float out[kGroup];
        auto rows = [&](size_t t, auto g) {
          constexpr size_t G = decltype(g)::value;
          for (size_t i = 0; i < G; ++i) {
            xp[i] = xq + (t + i) * 2 * cols;
            sp[i] = &expanded[(t + i - t0) * pairs * 16];
            mp[i] = xsum + (t + i) * nb;
          }
          RowI8<kKind, G>(row, nb, cols, xp, sp, mp, out);
          for (size_t i = 0; i < G; ++i)
            y[(t + i) * y_stride + r] = out[i];
        };
        size_t t = t0;
        for (; t + kGroup <= t1; t += kGroup)
          rows(t, std::integral_constant<size_t, kGroup>());
        for (; t + 2 <= t1; t += 2)
          rows(t, std::integral_constant<size_t, 2>());
        if (t < t1)
          rows(t, std::integral_constant<size_t, 1>());
#else
        for (size_t t = t0; t < t1; ++t)
          y[t * y_stride + r] =
              RowI8Scalar<kKind>(row, nb, cols, xq + t * 2 * cols, xscale + t * nb, xsum + t * nb);
#endif
      }
    }
  }
}

} // namespace pig::runtime::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif // include guard
