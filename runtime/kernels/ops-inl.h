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

} // namespace pig::runtime::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif // include guard
