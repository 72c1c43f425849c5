// SIMD building blocks of the runtime (Highway, compiled once per target through
// foreach_target.h by the including .cc). Callers dispatch once at the top of an op and then
// call these target-specific functions directly.
//
// Weights stay in their file format; a kernel dequantises a few rows at a time into a small
// buffer that stays in cache and runs f32 dot products against it, so a quantised model is
// never expanded in memory.

#if defined(PIG_RUNTIME_KERNELS_OPS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PIG_RUNTIME_KERNELS_OPS_INL_H_
#undef PIG_RUNTIME_KERNELS_OPS_INL_H_
#else
#define PIG_RUNTIME_KERNELS_OPS_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hwy/cache_control.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#if HWY_ARCH_X86
#include <immintrin.h>
#endif
#include "pig/runtime/ggml_types.h"

HWY_BEFORE_NAMESPACE();
namespace pig::runtime::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

// 16 bytes of 4-bit codes -> 32 floats: low nibbles to y[0..15], high nibbles to y[16..31]
// (the Q4_0 / Q4_1 layout), each as scale * q + bias.
HWY_INLINE void NibblesToF32(const uint8_t *qs, float scale, float bias, float *y) {
  const DF df;
  const hn::Rebind<int32_t, DF> di;
  const hn::Rebind<uint8_t, DF> d8;
  const size_t N = hn::Lanes(df);
  const auto vs = hn::Set(df, scale), vb = hn::Set(df, bias);
  const auto mask = hn::Set(di, 0xF);
  for (size_t j = 0; j < 16; j += N) {
    const auto q = hn::PromoteTo(di, hn::LoadU(d8, qs + j));
    const auto lo = hn::ConvertTo(df, hn::And(q, mask));
    const auto hi = hn::ConvertTo(df, hn::ShiftRight<4>(q));
    hn::StoreU(hn::MulAdd(vs, lo, vb), df, y + j);
    hn::StoreU(hn::MulAdd(vs, hi, vb), df, y + 16 + j);
  }
}

// Q4_K sub-block pair: 32 bytes -> 64 floats (low nibbles with (d1, -m1), high with (d2, -m2)).
HWY_INLINE void NibblePairsToF32(const uint8_t *q, float d1, float m1, float d2, float m2,
                                 float *y) {
  const DF df;
  const hn::Rebind<int32_t, DF> di;
  const hn::Rebind<uint8_t, DF> d8;
  const size_t N = hn::Lanes(df);
  const auto vd1 = hn::Set(df, d1), vm1 = hn::Set(df, -m1);
  const auto vd2 = hn::Set(df, d2), vm2 = hn::Set(df, -m2);
  const auto mask = hn::Set(di, 0xF);
  for (size_t l = 0; l < 32; l += N) {
    const auto v = hn::PromoteTo(di, hn::LoadU(d8, q + l));
    hn::StoreU(hn::MulAdd(vd1, hn::ConvertTo(df, hn::And(v, mask)), vm1), df, y + l);
    hn::StoreU(hn::MulAdd(vd2, hn::ConvertTo(df, hn::ShiftRight<4>(v)), vm2), df, y + 32 + l);
  }
}

HWY_INLINE void Q6KHalfToF32(const uint8_t *ql, const uint8_t *qh, const int8_t *sc, float d,
                             float *y) {
  const DF df;
  const hn::Rebind<int32_t, DF> di;
  const hn::Rebind<uint8_t, DF> d8;
  const size_t N = hn::Lanes(df);
  const auto m4 = hn::Set(di, 0xF), m2 = hn::Set(di, 3), k32 = hn::Set(di, 32);
  for (size_t l = 0; l < 32; l += N) {
    const size_t is = l / 16; // N <= 16 and divides 16, so one scale per vector
    const auto a = hn::PromoteTo(di, hn::LoadU(d8, ql + l));
    const auto b = hn::PromoteTo(di, hn::LoadU(d8, ql + l + 32));
    const auto h = hn::PromoteTo(di, hn::LoadU(d8, qh + l));
    const auto q1 = hn::Sub(hn::Or(hn::And(a, m4), hn::ShiftLeft<4>(hn::And(h, m2))), k32);
    const auto q2 =
        hn::Sub(hn::Or(hn::And(b, m4), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<2>(h), m2))), k32);
    const auto q3 = hn::Sub(
        hn::Or(hn::ShiftRight<4>(a), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<4>(h), m2))), k32);
    const auto q4 = hn::Sub(
        hn::Or(hn::ShiftRight<4>(b), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<6>(h), m2))), k32);
    hn::StoreU(hn::Mul(hn::Set(df, d * float(sc[is + 0])), hn::ConvertTo(df, q1)), df, y + l);
    hn::StoreU(hn::Mul(hn::Set(df, d * float(sc[is + 2])), hn::ConvertTo(df, q2)), df, y + l + 32);
    hn::StoreU(hn::Mul(hn::Set(df, d * float(sc[is + 4])), hn::ConvertTo(df, q3)), df, y + l + 64);
    hn::StoreU(hn::Mul(hn::Set(df, d * float(sc[is + 6])), hn::ConvertTo(df, q4)), df, y + l + 96);
  }
}

// Dequantises n elements (a multiple of the type's block size) of one row.
HWY_INLINE void DequantRowImpl(GgmlType type, const uint8_t *src, float *y, size_t n) {
  const DF df;
  const size_t N = hn::Lanes(df);
  if (N > 16) { // wider than any block layout below assumes: fall back to the reference
    DequantizeRowScalar(type, src, y, n);
    return;
  }
  switch (type) {
  case GgmlType::kF32:
    std::memcpy(y, src, n * sizeof(float));
    return;
  case GgmlType::kF16: {
    const hn::Rebind<hwy::float16_t, DF> dh;
    size_t i = 0;
    for (; i + N <= n; i += N) {
      hn::StoreU(
          hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t *>(src) + i)), df,
          y + i);
    }
    for (; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      y[i] = F16ToF32Fast(h);
    }
    return;
  }
  case GgmlType::kBF16: {
    // bf16 is the high half of an f32: widen by a shift (no bf16 ops needed on any target).
    const hn::Rebind<uint16_t, DF> d16;
    const hn::Rebind<uint32_t, DF> du;
    size_t i = 0;
    for (; i + N <= n; i += N) {
      const auto w = hn::PromoteTo(du, hn::LoadU(d16, reinterpret_cast<const uint16_t *>(src) + i));
      hn::StoreU(hn::BitCast(df, hn::ShiftLeft<16>(w)), df, y + i);
    }
    for (; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      y[i] = BF16ToF32(h);
    }
    return;
  }
  case GgmlType::kQ8_0: {
    const hn::Rebind<int32_t, DF> di;
    const hn::Rebind<int8_t, DF> d8;
    for (size_t b = 0; b < n / 32; ++b, y += 32) {
      const auto *blk = reinterpret_cast<const BlockQ8_0 *>(src) + b;
      const auto vd = hn::Set(df, F16ToF32Fast(blk->d));
      for (size_t j = 0; j < 32; j += N) {
        const auto q = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, blk->qs + j)));
        hn::StoreU(hn::Mul(vd, q), df, y + j);
      }
    }
    return;
  }
  case GgmlType::kQ4_0:
    for (size_t b = 0; b < n / 32; ++b, y += 32) {
      const auto *blk = reinterpret_cast<const BlockQ4_0 *>(src) + b;
      const float d = F16ToF32Fast(blk->d);
      NibblesToF32(blk->qs, d, -8.0f * d, y);
    }
    return;
  case GgmlType::kQ4_1:
    for (size_t b = 0; b < n / 32; ++b, y += 32) {
      const auto *blk = reinterpret_cast<const BlockQ4_1 *>(src) + b;
      NibblesToF32(blk->qs, F16ToF32Fast(blk->d), F16ToF32Fast(blk->m), y);
    }
    return;
  case GgmlType::kQ4_K:
    for (size_t b = 0; b < n / 256; ++b) {
      const auto *blk = reinterpret_cast<const BlockQ4_K *>(src) + b;
      const float d = F16ToF32Fast(blk->d), dmin = F16ToF32Fast(blk->dmin);
      for (int is = 0; is < 8; is += 2, y += 64) {
        uint8_t sc1, mn1, sc2, mn2;
        Q4KScaleMin(is, blk->scales, &sc1, &mn1);
        Q4KScaleMin(is + 1, blk->scales, &sc2, &mn2);
        NibblePairsToF32(blk->qs + is * 16, d * sc1, dmin * mn1, d * sc2, dmin * mn2, y);
      }
    }
    return;
  case GgmlType::kQ6_K:
    for (size_t b = 0; b < n / 256; ++b) {
      const auto *blk = reinterpret_cast<const BlockQ6_K *>(src) + b;
      const float d = F16ToF32Fast(blk->d);
      for (int half = 0; half < 2; ++half, y += 128) {
        Q6KHalfToF32(blk->ql + 64 * half, blk->qh + 32 * half, blk->scales + 8 * half, d, y);
      }
    }
    return;
  default:
    DequantizeRowScalar(type, src, y, n);
    return;
  }
}

HWY_INLINE float DotImpl(const float *HWY_RESTRICT a, const float *HWY_RESTRICT b, size_t n) {
  const DF df;
  const size_t N = hn::Lanes(df);
  auto s0 = hn::Zero(df), s1 = hn::Zero(df), s2 = hn::Zero(df), s3 = hn::Zero(df);
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    s0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(df, a + i + N), hn::LoadU(df, b + i + N), s1);
    s2 = hn::MulAdd(hn::LoadU(df, a + i + 2 * N), hn::LoadU(df, b + i + 2 * N), s2);
    s3 = hn::MulAdd(hn::LoadU(df, a + i + 3 * N), hn::LoadU(df, b + i + 3 * N), s3);
  }
  for (; i + N <= n; i += N)
    s0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), s0);
  float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
  for (; i < n; ++i)
    sum += a[i] * b[i];
  return sum;
}

// Four rows (contiguous, `stride` apart) against one vector: the vector is loaded once.
HWY_INLINE void Dot4Impl(const float *HWY_RESTRICT w, size_t stride, const float *HWY_RESTRICT x,
                         size_t n, float *out) {
  const DF df;
  const size_t N = hn::Lanes(df);
  auto s0 = hn::Zero(df), s1 = hn::Zero(df), s2 = hn::Zero(df), s3 = hn::Zero(df);
  const float *w0 = w, *w1 = w + stride, *w2 = w + 2 * stride, *w3 = w + 3 * stride;
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto vx = hn::LoadU(df, x + i);
    s0 = hn::MulAdd(hn::LoadU(df, w0 + i), vx, s0);
    s1 = hn::MulAdd(hn::LoadU(df, w1 + i), vx, s1);
    s2 = hn::MulAdd(hn::LoadU(df, w2 + i), vx, s2);
    s3 = hn::MulAdd(hn::LoadU(df, w3 + i), vx, s3);
  }
  out[0] = hn::GetLane(hn::SumOfLanes(df, s0));
  out[1] = hn::GetLane(hn::SumOfLanes(df, s1));
  out[2] = hn::GetLane(hn::SumOfLanes(df, s2));
  out[3] = hn::GetLane(hn::SumOfLanes(df, s3));
  for (; i < n; ++i) {
    out[0] += w0[i] * x[i];
    out[1] += w1[i] * x[i];
    out[2] += w2[i] * x[i];
    out[3] += w3[i] * x[i];
  }
}

// One row against one vector with the per-row arithmetic of Dot4Impl and Dot4x3Impl (one
// accumulator, then the scalar tail): whichever micro-kernel a (row, token) pair falls into, its
// result is the same, so the f32 matrix-matrix path does not depend on how tokens are grouped.
HWY_INLINE float Dot1Impl(const float *HWY_RESTRICT w, const float *HWY_RESTRICT x, size_t n) {
  const DF df;
  const size_t N = hn::Lanes(df);
  auto s0 = hn::Zero(df);
  size_t i = 0;
  for (; i + N <= n; i += N)
    s0 = hn::MulAdd(hn::LoadU(df, w + i), hn::LoadU(df, x + i), s0);
  float out = hn::GetLane(hn::SumOfLanes(df, s0));
  for (; i < n; ++i)
    out += w[i] * x[i];
  return out;
}

// Four rows x three vectors: 12 accumulators share each weight load and each x load (the
// prefill micro-kernel; register-bound on AVX2's 16 vector registers).
HWY_INLINE void Dot4x3Impl(const float *HWY_RESTRICT w, size_t stride, const float *HWY_RESTRICT x,
                           size_t x_stride, size_t n, float *out, size_t out_stride) {
  const DF df;
  const size_t N = hn::Lanes(df);
  auto a00 = hn::Zero(df), a01 = hn::Zero(df), a02 = hn::Zero(df);
  auto a10 = hn::Zero(df), a11 = hn::Zero(df), a12 = hn::Zero(df);
  auto a20 = hn::Zero(df), a21 = hn::Zero(df), a22 = hn::Zero(df);
  auto a30 = hn::Zero(df), a31 = hn::Zero(df), a32 = hn::Zero(df);
  const float *x0 = x, *x1 = x + x_stride, *x2 = x + 2 * x_stride;
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v0 = hn::LoadU(df, x0 + i), v1 = hn::LoadU(df, x1 + i), v2 = hn::LoadU(df, x2 + i);
    auto wv = hn::LoadU(df, w + i);
    a00 = hn::MulAdd(wv, v0, a00), a01 = hn::MulAdd(wv, v1, a01), a02 = hn::MulAdd(wv, v2, a02);
    wv = hn::LoadU(df, w + stride + i);
    a10 = hn::MulAdd(wv, v0, a10), a11 = hn::MulAdd(wv, v1, a11), a12 = hn::MulAdd(wv, v2, a12);
    wv = hn::LoadU(df, w + 2 * stride + i);
    a20 = hn::MulAdd(wv, v0, a20), a21 = hn::MulAdd(wv, v1, a21), a22 = hn::MulAdd(wv, v2, a22);
    wv = hn::LoadU(df, w + 3 * stride + i);
    a30 = hn::MulAdd(wv, v0, a30), a31 = hn::MulAdd(wv, v1, a31), a32 = hn::MulAdd(wv, v2, a32);
  }
  float r[4][3] = {{hn::GetLane(hn::SumOfLanes(df, a00)), hn::GetLane(hn::SumOfLanes(df, a01)),
                    hn::GetLane(hn::SumOfLanes(df, a02))},
                   {hn::GetLane(hn::SumOfLanes(df, a10)), hn::GetLane(hn::SumOfLanes(df, a11)),
                    hn::GetLane(hn::SumOfLanes(df, a12))},
                   {hn::GetLane(hn::SumOfLanes(df, a20)), hn::GetLane(hn::SumOfLanes(df, a21)),
                    hn::GetLane(hn::SumOfLanes(df, a22))},
                   {hn::GetLane(hn::SumOfLanes(df, a30)), hn::GetLane(hn::SumOfLanes(df, a31)),
                    hn::GetLane(hn::SumOfLanes(df, a32))}};
  for (; i < n; ++i) {
    for (size_t row = 0; row < 4; ++row) {
      r[row][0] += w[row * stride + i] * x0[i];
      r[row][1] += w[row * stride + i] * x1[i];
      r[row][2] += w[row * stride + i] * x2[i];
    }
  }
  for (size_t row = 0; row < 4; ++row) {
    for (size_t t = 0; t < 3; ++t)
      out[t * out_stride + row] = r[row][t];
  }
}

// y = x * w (elementwise), then scaled by 1/rms(x).
HWY_INLINE void RmsNormImpl(const float *HWY_RESTRICT x, const float *HWY_RESTRICT w,
                            float *HWY_RESTRICT y, size_t n, float eps) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const float ss = DotImpl(x, x, n);
  const float inv = 1.0f / std::sqrt(ss / float(n) + eps);
  const auto vinv = hn::Set(df, inv);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(df, x + i), vinv), hn::LoadU(df, w + i)), df, y + i);
  }
  for (; i < n; ++i)
    y[i] = x[i] * inv * w[i];
}

// gate = silu(gate) * up
HWY_INLINE void SwiGluImpl(float *HWY_RESTRICT gate, const float *HWY_RESTRICT up, size_t n) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const auto one = hn::Set(df, 1.0f);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto g = hn::LoadU(df, gate + i);
    const auto sig = hn::Div(one, hn::Add(one, hn::Exp(df, hn::Neg(g))));
    hn::StoreU(hn::Mul(hn::Mul(g, sig), hn::LoadU(df, up + i)), df, gate + i);
  }
  for (; i < n; ++i)
    gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

// y += a * x
HWY_INLINE void AxpyImpl(float a, const float *HWY_RESTRICT x, float *HWY_RESTRICT y, size_t n) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const auto va = hn::Set(df, a);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(hn::MulAdd(va, hn::LoadU(df, x + i), hn::LoadU(df, y + i)), df, y + i);
  }
  for (; i < n; ++i)
    y[i] += a * x[i];
}

// In place: x = exp(x - max) / sum, returns nothing; n >= 1.
HWY_INLINE void SoftmaxImpl(float *x, size_t n) {
  const DF df;
  const size_t N = hn::Lanes(df);
  float mx = x[0];
  for (size_t i = 1; i < n; ++i)
    mx = x[i] > mx ? x[i] : mx;
  const auto vmx = hn::Set(df, mx);
  auto vsum = hn::Zero(df);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto e = hn::Exp(df, hn::Sub(hn::LoadU(df, x + i), vmx));
    hn::StoreU(e, df, x + i);
    vsum = hn::Add(vsum, e);
  }
  float sum = hn::GetLane(hn::SumOfLanes(df, vsum));
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const auto vinv = hn::Set(df, 1.0f / sum);
  for (i = 0; i + N <= n; i += N)
    hn::StoreU(hn::Mul(hn::LoadU(df, x + i), vinv), df, x + i);
  for (; i < n; ++i)
    x[i] /= sum;
}

// ---- Decode (one activation vector): integer dot products on the packed blocks ----
// The vector is quantised once per op to int16 per 32-element block (scale = max|x| / 32767,
// relative error ~1.5e-5 of the block's largest element); a weight block then costs one
// widening load, nibble masks and two pairwise multiply-adds (vpmaddwd) instead of a float
// conversion per element. Capped at 16 lanes of int16 so a block is a whole number of vectors.
using D16 = hn::CappedTag<int16_t, 16>;

// Reference of QuantizeI16Impl (also its fallback). A block holding a NaN or an infinity (its sum
// is not finite) gets a NaN scale.
HWY_INLINE void QuantizeI16Scalar(const float *HWY_RESTRICT x, size_t n, int16_t *HWY_RESTRICT xq,
                                  float *HWY_RESTRICT scale, float *HWY_RESTRICT sum) {
  for (size_t b = 0; b < n / 32; ++b) {
    const float *xb = x + 32 * b;
    float amax = 0, s = 0;
    for (size_t j = 0; j < 32; ++j) {
      amax = std::max(amax, std::abs(xb[j]));
      s += xb[j];
    }
    const float d = amax / 32767.0f;
    const float inv = d > 0 ? 1.0f / d : 0.0f;
    for (size_t j = 0; j < 32; ++j)
      xq[32 * b + j] = std::isfinite(s) ? int16_t(std::lrintf(xb[j] * inv)) : 0;
    scale[b] = std::isfinite(s) ? d : std::numeric_limits<float>::quiet_NaN();
    sum[b] = s;
  }
}

HWY_INLINE void QuantizeI16Impl(const float *HWY_RESTRICT x, size_t n, int16_t *HWY_RESTRICT xq,
                                float *HWY_RESTRICT scale, float *HWY_RESTRICT sum) {
  const DF df;
  const size_t N = hn::Lanes(df);
  if (N > 32) { // a block must be a whole number of vectors
    QuantizeI16Scalar(x, n, xq, scale, sum);
    return;
  }
  const hn::Rebind<int16_t, DF> d16;
  for (size_t b = 0; b < n / 32; ++b) {
    const float *xb = x + 32 * b;
    auto vmax = hn::Zero(df), vsum = hn::Zero(df);
    for (size_t j = 0; j < 32; j += N) {
      const auto v = hn::LoadU(df, xb + j);
      vmax = hn::Max(vmax, hn::Abs(v));
      vsum = hn::Add(vsum, v);
    }
    const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    const float d = amax / 32767.0f;
    const auto vinv = hn::Set(df, d > 0 ? 1.0f / d : 0.0f);
    for (size_t j = 0; j < 32; j += N) {
      const auto q = hn::NearestInt(hn::Mul(hn::LoadU(df, xb + j), vinv));
      hn::StoreU(hn::DemoteTo(d16, q), d16, xq + 32 * b + j);
    }
    const float s = hn::GetLane(hn::SumOfLanes(df, vsum));
    // A NaN or infinity in the block (its sum is not finite): the codes would silently saturate,
    // so the block's scale is NaN and every product with it is NaN, as in f32.
    scale[b] = std::isfinite(s) ? d : std::numeric_limits<float>::quiet_NaN();
    sum[b] = s;
  }
}

// Block kinds of the integer decode path.
enum class QKind { kQ4_0, kQ4_1, kQ8_0, kQ4_K, kQ6_K };

template <QKind kKind> constexpr size_t QBlockBytes() {
  return kKind == QKind::kQ4_0   ? sizeof(BlockQ4_0)
         : kKind == QKind::kQ4_1 ? sizeof(BlockQ4_1)
                                 : sizeof(BlockQ8_0);
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

// acc + the pairwise products of a and b, as int32 lanes (vpmaddwd then vpaddd). On AVX-512 VNNI
// one vpdpwssd does both: the same integers (no saturation, no rounding), so the VNNI target's
// results equal its pmaddwd ones bit for bit.
//
// Written as inline assembly with an explicit {evex} prefix: Highway 1.0.3 compiles AVX3_DL with
// -mavxvnni as well, and GCC then encodes _mm256_dpwssd_epi32 (and its masked forms, whose
// all-ones mask it folds away) in the VEX form of AVX-VNNI, an ISA that AVX-512 VNNI CPUs such as
// Zen 4 EPYCs and Ice Lake Xeons do not have: the VEX form dies there with SIGILL. The EVEX form
// is AVX512_VNNI + AVX512VL, which every AVX3_DL CPU has.
template <class D32, class V16>
HWY_INLINE hn::Vec<D32> DotPairsAdd(D32 d32, V16 a, V16 b, hn::Vec<D32> acc) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3_DL
  if constexpr (sizeof(a.raw) == 32) {
    auto r = acc.raw;
    __asm__("%{evex%} vpdpwssd %2, %1, %0" : "+v"(r) : "v"(a.raw), "v"(b.raw));
    return hn::Vec<D32>{r};
  }
#endif
  auto unused = hn::Zero(d32);
  return hn::ReorderWidenMulAccumulate(d32, a, b, acc, unused);
}

// <q, xq> of one 32-element block, given as int16 vectors in element order, and one activation
// block: alternate vectors into two int32 accumulators (pairwise multiply-adds), added, converted
// to float lanes (only their sum matters). DotQI16Rows and DotQ4KRows share it.
HWY_INLINE hn::Vec<hn::Repartition<float, D16>> BlockDot32(const hn::Vec<D16> *v,
                                                           const int16_t *HWY_RESTRICT xb) {
  const D16 d16;
  const hn::Repartition<int32_t, D16> d32;
  const hn::Repartition<float, D16> df;
  constexpr size_t kVecs = 32 / hn::MaxLanes(D16());
  const size_t N = hn::Lanes(d16);
  auto acc0 = hn::Zero(d32), acc1 = hn::Zero(d32), unused = hn::Zero(d32);
  for (size_t i = 0; i < kVecs; i += 2) {
    acc0 = DotPairsAdd(d32, v[i], hn::LoadU(d16, xb + i * N), acc0);
    acc1 = DotPairsAdd(d32, v[i + 1], hn::LoadU(d16, xb + (i + 1) * N), acc1);
  }
  acc0 = hn::RearrangeToOddPlusEven(acc0, unused);
  acc1 = hn::RearrangeToOddPlusEven(acc1, unused);
  return hn::ConvertTo(df, hn::Add(acc0, acc1));
}

// <q, xq> of one block as int32 lanes converted to float (only their sum matters).
template <QKind kKind, class DF8>
HWY_INLINE hn::Vec<DF8> BlockDotI16(DF8 df, const uint8_t *HWY_RESTRICT blk,
                                    const int16_t *HWY_RESTRICT xb) {
  const D16 d16;
  const hn::Repartition<int32_t, D16> d32;
  const hn::Rebind<uint8_t, D16> du8;
  const hn::Rebind<int8_t, D16> di8;
  const size_t N = hn::Lanes(d16);
  auto acc0 = hn::Zero(d32), acc1 = hn::Zero(d32), unused = hn::Zero(d32);
  if (kKind == QKind::kQ8_0) {
    const int8_t *qs = reinterpret_cast<const int8_t *>(blk + 2);
    for (size_t j = 0; j < 32; j += 2 * N) {
      const auto v0 = hn::PromoteTo(d16, hn::LoadU(di8, qs + j));
      const auto v1 = hn::PromoteTo(d16, hn::LoadU(di8, qs + j + N));
      acc0 = DotPairsAdd(d32, v0, hn::LoadU(d16, xb + j), acc0);
      acc1 = DotPairsAdd(d32, v1, hn::LoadU(d16, xb + j + N), acc1);
    }
  } else {
    const auto mask = hn::Set(d16, int16_t(0xF));
    const uint8_t *qs = blk + (kKind == QKind::kQ4_1 ? 4 : 2);
    for (size_t j = 0; j < 16; j += N) {
      const auto v = hn::PromoteTo(d16, hn::LoadU(du8, qs + j));
      acc0 = DotPairsAdd(d32, hn::And(v, mask), hn::LoadU(d16, xb + j), acc0);
      acc1 = DotPairsAdd(d32, hn::ShiftRight<4>(v), hn::LoadU(d16, xb + 16 + j), acc1);
    }
  }
  acc0 = hn::RearrangeToOddPlusEven(acc0, unused);
  acc1 = hn::RearrangeToOddPlusEven(acc1, unused);
  return hn::ConvertTo(df, hn::Add(acc0, acc1));
}

// One weight row against one activation row, the decode path at B = 1 (matvec_i16): the
// arithmetic of DotQI16Rows for G = 1, written for one row (11 % faster than DotQI16Rows<1> when
// the weights stream from memory: a one-off loop over 70 MB of Q4_1, Zen 2 EPYC, 2026-12-03, and
// B = 1 decode was 10 % slower with DotQI16Rows<1>); kernels_test checks the two bit for bit on
// every target.
// One row: sum over blocks of d_w * d_x * <q, xq>, plus sum_b m_b * sum(x_b) for Q4_1; Q4_0's
// nibble offset is folded the same way (-8 d_b * sum(x_b), sum(x_b) the exact float sum)
// instead of being subtracted from every nibble. Two blocks per iteration, two accumulators.
template <QKind kKind>
HWY_INLINE float DotQI16Row(const uint8_t *HWY_RESTRICT row, size_t n_blocks,
                            const int16_t *HWY_RESTRICT xq, const float *HWY_RESTRICT xscale,
                            const float *HWY_RESTRICT xsum) {
  constexpr size_t kBytes = QBlockBytes<kKind>();
  const hn::Repartition<float, D16> df;
  auto total0 = hn::Zero(df), total1 = hn::Zero(df);
  float bias0 = 0, bias1 = 0;
  size_t b = 0;
  for (; b + 2 <= n_blocks; b += 2) {
    const uint8_t *blk = row + b * kBytes;
    const float d0 = BlockF16(blk), d1 = BlockF16(blk + kBytes);
    total0 =
        hn::MulAdd(BlockDotI16<kKind>(df, blk, xq + 32 * b), hn::Set(df, d0 * xscale[b]), total0);
    total1 = hn::MulAdd(BlockDotI16<kKind>(df, blk + kBytes, xq + 32 * b + 32),
                        hn::Set(df, d1 * xscale[b + 1]), total1);
    if (kKind == QKind::kQ4_1) {
      bias0 += BlockF16(blk + 2) * xsum[b];
      bias1 += BlockF16(blk + kBytes + 2) * xsum[b + 1];
    } else if (kKind == QKind::kQ4_0) {
      bias0 += d0 * xsum[b];
      bias1 += d1 * xsum[b + 1];
    }
  }
  for (; b < n_blocks; ++b) {
    const uint8_t *blk = row + b * kBytes;
    const float d = BlockF16(blk);
    total0 =
        hn::MulAdd(BlockDotI16<kKind>(df, blk, xq + 32 * b), hn::Set(df, d * xscale[b]), total0);
    if (kKind == QKind::kQ4_1)
      bias0 += BlockF16(blk + 2) * xsum[b];
    else if (kKind == QKind::kQ4_0)
      bias0 += d * xsum[b];
  }
  const float bias = kKind == QKind::kQ4_0 ? -8.0f * (bias0 + bias1) : bias0 + bias1;
  return hn::GetLane(hn::SumOfLanes(df, hn::Add(total0, total1))) + bias;
}

// One weight row against G activation rows: for each activation row g, the sum over blocks of
// (d_w * d_x[g]) * <q, xq[g]>, plus sum_b m_b * sum(x_b) for Q4_1; Q4_0's nibble offset is folded
// the same way (-8 d_b * sum(x_b), sum(x_b) the exact float sum) instead of being subtracted from
// every nibble. Blocks go in pairs into two accumulators per activation row.
//
// Every activation row takes exactly the operations it takes when G == 1, in the same order; the
// weight block is only unpacked once for all G. So a row's result does not depend on G or on the
// other rows (what LlamaForward relies on for batch-independent logits).
template <QKind kKind, size_t G>
HWY_INLINE void DotQI16Rows(const uint8_t *HWY_RESTRICT row, size_t n_blocks,
                            const int16_t *const *HWY_RESTRICT xq,
                            const float *const *HWY_RESTRICT xscale,
                            const float *const *HWY_RESTRICT xsum, float *HWY_RESTRICT out) {
  constexpr size_t kBytes = QBlockBytes<kKind>();
  const D16 d16;
  const hn::Repartition<float, D16> df;
  const hn::Rebind<uint8_t, D16> du8;
  const hn::Rebind<int8_t, D16> di8;
  const size_t N = hn::Lanes(d16);
  // A block as int16 vectors in the order they are multiplied: Q8_0 32 codes, Q4 low then high
  // nibbles.
  constexpr size_t kVecs = 32 / hn::MaxLanes(D16());
  using V16 = hn::Vec<D16>;
  auto unpack = [&](const uint8_t *blk, V16 *v) {
    if (kKind == QKind::kQ8_0) {
      const int8_t *qs = reinterpret_cast<const int8_t *>(blk + 2);
      for (size_t j = 0, i = 0; j < 32; j += N, ++i)
        v[i] = hn::PromoteTo(d16, hn::LoadU(di8, qs + j));
    } else {
      const auto mask = hn::Set(d16, int16_t(0xF));
      const uint8_t *qs = blk + (kKind == QKind::kQ4_1 ? 4 : 2);
      const size_t half = 16 / N;
      for (size_t j = 0, i = 0; j < 16; j += N, ++i) {
        const auto q = hn::PromoteTo(d16, hn::LoadU(du8, qs + j));
        v[i] = hn::And(q, mask);
        v[half + i] = hn::ShiftRight<4>(q);
      }
    }
  };
  hn::Vec<decltype(df)> total0[G], total1[G];
  float bias0[G], bias1[G];
  for (size_t g = 0; g < G; ++g) {
    total0[g] = total1[g] = hn::Zero(df);
    bias0[g] = bias1[g] = 0.0f;
  }
  V16 v[kVecs];
  size_t b = 0;
  for (; b + 2 <= n_blocks; b += 2) {
    const uint8_t *blk = row + b * kBytes;
    const float d0 = BlockF16(blk), d1 = BlockF16(blk + kBytes);
    const float m0 = kKind == QKind::kQ4_1 ? BlockF16(blk + 2) : d0;
    const float m1 = kKind == QKind::kQ4_1 ? BlockF16(blk + kBytes + 2) : d1;
    unpack(blk, v);
    for (size_t g = 0; g < G; ++g)
      total0[g] =
          hn::MulAdd(BlockDot32(v, xq[g] + 32 * b), hn::Set(df, d0 * xscale[g][b]), total0[g]);
    unpack(blk + kBytes, v);
    for (size_t g = 0; g < G; ++g) {
      total1[g] = hn::MulAdd(BlockDot32(v, xq[g] + 32 * b + 32), hn::Set(df, d1 * xscale[g][b + 1]),
                             total1[g]);
      if (kKind != QKind::kQ8_0) {
        bias0[g] += m0 * xsum[g][b];
        bias1[g] += m1 * xsum[g][b + 1];
      }
    }
  }
  if (b < n_blocks) { // an odd number of blocks: the last one
    const uint8_t *blk = row + b * kBytes;
    const float d = BlockF16(blk);
    const float m = kKind == QKind::kQ4_1 ? BlockF16(blk + 2) : d;
    unpack(blk, v);
    for (size_t g = 0; g < G; ++g) {
      total0[g] =
          hn::MulAdd(BlockDot32(v, xq[g] + 32 * b), hn::Set(df, d * xscale[g][b]), total0[g]);
      if (kKind != QKind::kQ8_0)
        bias0[g] += m * xsum[g][b];
    }
  }
  for (size_t g = 0; g < G; ++g) {
    const float bias = kKind == QKind::kQ4_0 ? -8.0f * (bias0[g] + bias1[g]) : bias0[g] + bias1[g];
    out[g] = hn::GetLane(hn::SumOfLanes(df, hn::Add(total0[g], total1[g]))) + bias;
  }
}

// Q4_K (super-blocks of 256: f16 d and dmin, 6-bit scale and minimum per 32-element sub-block,
// two sub-blocks per 32 bytes of nibbles: low nibbles the first, high the second) against G
// activation rows: a sub-block is one 32-element activation block, so the integer path is that of
// Q4_1 with the sub-block's scale d * sc and minimum dmin * m: sum over sub-blocks of
// (d sc * d_x[g]) * <q, xq[g]> - dmin m * sum(x_b). Even sub-blocks go into one accumulator, odd
// ones into the other; every activation row takes the operations it takes alone (G == 1), so the
// result does not depend on G (kernels_test).
template <size_t G>
HWY_INLINE void DotQ4KRows(const uint8_t *HWY_RESTRICT row, size_t n_super,
                           const int16_t *const *HWY_RESTRICT xq,
                           const float *const *HWY_RESTRICT xscale,
                           const float *const *HWY_RESTRICT xsum, float *HWY_RESTRICT out) {
  const D16 d16;
  const hn::Repartition<float, D16> df;
  const hn::Rebind<uint8_t, D16> du8;
  const size_t N = hn::Lanes(d16);
  constexpr size_t kVecs = 32 / hn::MaxLanes(D16());
  using V16 = hn::Vec<D16>;
  const auto mask = hn::Set(d16, int16_t(0xF));
  hn::Vec<decltype(df)> total0[G], total1[G];
  float bias0[G], bias1[G];
  for (size_t g = 0; g < G; ++g) {
    total0[g] = total1[g] = hn::Zero(df);
    bias0[g] = bias1[g] = 0.0f;
  }
  V16 lo[kVecs], hi[kVecs];
  for (size_t sb = 0; sb < n_super; ++sb) {
    const uint8_t *blk = row + sb * sizeof(BlockQ4_K);
    const float d = BlockF16(blk), dmin = BlockF16(blk + 2);
    const uint8_t *scales = blk + 4, *qs = blk + 16;
    // The 6-bit scales and minima of the 8 sub-blocks (Q4KScaleMin's unpacking, inline: a call
    // per sub-block cost more than its dot products at one row).
    float ds[8], dm[8];
    for (int j = 0; j < 8; ++j) {
      const int sc = j < 4 ? scales[j] & 63 : (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
      const int m = j < 4 ? scales[j + 4] & 63 : (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
      ds[j] = d * float(sc);
      dm[j] = dmin * float(m);
    }
    for (int j = 0; j < 4; ++j) {
      const float ds0 = ds[2 * j], ds1 = ds[2 * j + 1], dm0 = dm[2 * j], dm1 = dm[2 * j + 1];
      for (size_t i = 0; i < kVecs; ++i) {
        const auto q = hn::PromoteTo(d16, hn::LoadU(du8, qs + 32 * j + i * N));
        lo[i] = hn::And(q, mask);
        hi[i] = hn::ShiftRight<4>(q);
      }
      const size_t b = sb * 8 + 2 * size_t(j); // the activation block of sub-block 2j
      for (size_t g = 0; g < G; ++g) {
        total0[g] =
            hn::MulAdd(BlockDot32(lo, xq[g] + 32 * b), hn::Set(df, ds0 * xscale[g][b]), total0[g]);
        total1[g] = hn::MulAdd(BlockDot32(hi, xq[g] + 32 * b + 32),
                               hn::Set(df, ds1 * xscale[g][b + 1]), total1[g]);
        bias0[g] += dm0 * xsum[g][b];
        bias1[g] += dm1 * xsum[g][b + 1];
      }
    }
  }
  for (size_t g = 0; g < G; ++g)
    out[g] = hn::GetLane(hn::SumOfLanes(df, hn::Add(total0[g], total1[g]))) - (bias0[g] + bias1[g]);
}

// Q6_K (super-blocks of 256: 6-bit codes as 4 low bits in ql and 2 high bits in qh, an int8 scale
// per 16 elements, one f16 d) against G activation rows. Activation block k of a super-block is
// ggml's quarter k % 4 of half k / 4: codes - 32 as int16 (so no offset term), its two halves of
// 16 elements with their own scales d * sc: sum over halves of (d sc * d_x[g]) * <q, xq[g]>, the
// first halves into one accumulator, the second into the other. Every activation row takes the
// operations it takes alone (G == 1): the result does not depend on G (kernels_test).
template <size_t G>
HWY_INLINE void DotQ6KRows(const uint8_t *HWY_RESTRICT row, size_t n_super,
                           const int16_t *const *HWY_RESTRICT xq,
                           const float *const *HWY_RESTRICT xscale, float *HWY_RESTRICT out) {
  const D16 d16;
  const hn::Repartition<int32_t, D16> d32;
  const hn::Repartition<float, D16> df;
  const hn::Rebind<uint8_t, D16> du8;
  const size_t N = hn::Lanes(d16);
  constexpr size_t kVecs = 32 / hn::MaxLanes(D16()), kHalf = kVecs / 2 > 0 ? kVecs / 2 : 1;
  static_assert(kVecs >= 2, "a 16-element half must be a whole number of vectors");
  using V16 = hn::Vec<D16>;
  const auto low4 = hn::Set(d16, int16_t(0xF)), two = hn::Set(d16, int16_t(3));
  const auto offset = hn::Set(d16, int16_t(32));
  // <q, xq> of the vectors [i0, i0 + kHalf) of an activation block.
  auto half_dot = [&](const V16 *v, size_t i0, const int16_t *HWY_RESTRICT xb) {
    auto acc = hn::Zero(d32), unused = hn::Zero(d32);
    for (size_t i = i0; i < i0 + kHalf; ++i)
      acc = DotPairsAdd(d32, v[i], hn::LoadU(d16, xb + i * N), acc);
    return hn::ConvertTo(df, hn::RearrangeToOddPlusEven(acc, unused));
  };
  hn::Vec<decltype(df)> total0[G], total1[G];
  for (size_t g = 0; g < G; ++g)
    total0[g] = total1[g] = hn::Zero(df);
  V16 v[kVecs];
  for (size_t sb = 0; sb < n_super; ++sb) {
    const auto *blk = reinterpret_cast<const BlockQ6_K *>(row + sb * sizeof(BlockQ6_K));
    uint16_t dh;
    std::memcpy(&dh, &blk->d, 2);
    const float d = BlockF16(reinterpret_cast<const uint8_t *>(&dh));
    for (size_t k = 0; k < 8; ++k) {
      const size_t half = k / 4, quarter = k % 4;
      const uint8_t *ql = blk->ql + 64 * half + 32 * (quarter & 1), *qh = blk->qh + 32 * half;
      const int8_t *sc = blk->scales + 8 * half + 2 * quarter;
      for (size_t i = 0; i < kVecs; ++i) {
        const auto l = hn::PromoteTo(d16, hn::LoadU(du8, ql + i * N));
        const auto h = hn::PromoteTo(d16, hn::LoadU(du8, qh + i * N));
        const auto lo = quarter < 2 ? hn::And(l, low4) : hn::ShiftRight<4>(l);
        const auto hi = hn::And(hn::ShiftRightSame(h, int(2 * quarter)), two);
        v[i] = hn::Sub(hn::Or(lo, hn::ShiftLeft<4>(hi)), offset);
      }
      const float ds0 = d * float(sc[0]), ds1 = d * float(sc[1]);
      const size_t b = sb * 8 + k;
      for (size_t g = 0; g < G; ++g) {
        total0[g] =
            hn::MulAdd(half_dot(v, 0, xq[g] + 32 * b), hn::Set(df, ds0 * xscale[g][b]), total0[g]);
        total1[g] = hn::MulAdd(half_dot(v, kHalf, xq[g] + 32 * b), hn::Set(df, ds1 * xscale[g][b]),
                               total1[g]);
      }
    }
  }
  for (size_t g = 0; g < G; ++g)
    out[g] = hn::GetLane(hn::SumOfLanes(df, hn::Add(total0[g], total1[g])));
}

} // namespace pig::runtime::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif // include guard
