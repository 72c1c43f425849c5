// Shared SIMD building blocks of the attention kernels (Highway, compiled once per target by
// the including file through foreach_target.h): bf16 widening and round-to-nearest-even
// narrowing, an accurate clamped exp, clamped acos, and row loads in a lane order that makes bf16
// widening one instruction per vector.
//
// Row layout ("kernel order"): a bf16 row is loaded 2N elements at a time as N u32 lanes; the
// even elements are the low halves (shift left 16), the odd ones the high halves (mask). Dot
// products do not care about the order as long as the other operand (the query, the mean, the
// output accumulator) is permuted the same way, so every such vector is stored in kernel order
// once per call and unpermuted at the end (ToKernelOrder / FromKernelOrder). f32 rows are in
// natural order. Elements past the last full vector (d not a multiple of the block) stay in
// natural order and are handled by scalar tails.

#if defined(PIG_RUNTIME_KERNELS_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PIG_RUNTIME_KERNELS_SIMD_INL_H_
#undef PIG_RUNTIME_KERNELS_SIMD_INL_H_
#else
#define PIG_RUNTIME_KERNELS_SIMD_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "pig/runtime/lsh_kernels.h" // lsh::Q8

HWY_BEFORE_NAMESPACE();
namespace pig::runtime::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
using VF = hn::Vec<DF>;

// ---- scalar bf16 (raw bits) --------------------------------------------------------------

HWY_INLINE float Bf16ToF32(std::uint16_t b) {
  const std::uint32_t u = std::uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest, ties to even; NaN stays NaN (quietened), infinities stay infinite.
HWY_INLINE std::uint16_t F32ToBf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u)
    return std::uint16_t((u >> 16) | 0x40u);
  return std::uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// ---- vector bf16 ---------------------------------------------------------------------------

// u32 lanes holding the rounded bf16 bits in their low half.
template <class D, class V = hn::Vec<D>>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> RoundToBf16Bits(D df, V v) {
  const hn::RebindToUnsigned<D> du;
  const auto bits = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  const auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(lsb, hn::Set(du, 0x7FFFu))));
  const auto quiet = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du, 0x40u));
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), quiet, rounded);
}

// n floats -> n bf16 with round to nearest even (Highway 1.0.3's DemoteTo truncates).
HWY_INLINE void F32ToBf16Row(const float *HWY_RESTRICT in, std::uint16_t *HWY_RESTRICT out,
                             std::size_t n) {
  const DF df;
  const DI di;
  const hn::Rebind<std::uint16_t, DF> d16;
  const std::size_t N = hn::Lanes(df);
  std::size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto r = hn::BitCast(di, RoundToBf16Bits(df, hn::LoadU(df, in + i)));
    hn::StoreU(hn::DemoteTo(d16, r), d16, out + i); // values are < 2^16: no saturation
  }
  for (; i < n; ++i)
    out[i] = F32ToBf16(in[i]);
}

HWY_INLINE void Bf16ToF32Row(const std::uint16_t *HWY_RESTRICT in, float *HWY_RESTRICT out,
                             std::size_t n) {
  const DF df;
  const DU du;
  const hn::Rebind<std::uint16_t, DF> d16;
  const std::size_t N = hn::Lanes(df);
  std::size_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, in + i)))), df,
               out + i);
  for (; i < n; ++i)
    out[i] = Bf16ToF32(in[i]);
}

// ---- accurate exp --------------------------------------------------------------------------

// e^x for f32 with <= 1e-6 relative error (measured ~2e-7) wherever the result is a normal
// float: Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, degree-7 Taylor polynomial, 2^n
// applied in two halves so no intermediate overflows. Below ln(FLT_MIN) = -87.336 the result is
// clamped to exactly 0 (no denormals, no garbage exponents); above ln(FLT_MAX) it is +inf; NaN
// stays NaN.
template <class D, class V = hn::Vec<D>> HWY_INLINE V ExpClamped(D d, V x) {
  const hn::RebindToSigned<D> di;
  const V lo = hn::Set(d, -87.33654475f), hi = hn::Set(d, 88.72283935f);
  const V xc = hn::Min(hn::Max(x, lo), hi);
  const V n = hn::Round(hn::Mul(xc, hn::Set(d, 1.44269504088896341f)));
  // ln2 split so that n * kLn2Hi is exact for |n| <= 256.
  V r = hn::NegMulAdd(n, hn::Set(d, 0.693145751953125f), xc);
  r = hn::NegMulAdd(n, hn::Set(d, 1.428606765330187045e-06f), r);
  V p = hn::Set(d, 1.0f / 5040.0f);
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 720.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 120.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 24.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 6.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.5f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  const auto ni = hn::ConvertTo(di, n);
  const auto n1 = hn::ShiftRight<1>(ni);
  const auto n2 = hn::Sub(ni, n1);
  const auto bias = hn::Set(di, 127);
  const V s1 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(n1, bias)));
  const V s2 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(n2, bias)));
  V y = hn::Mul(hn::Mul(p, s1), s2);
  y = hn::IfThenZeroElse(hn::Lt(x, lo), y);
  y = hn::IfThenElse(hn::Gt(x, hi), hn::Set(d, HUGE_VALF), y);
  return hn::IfThenElse(hn::IsNaN(x), x, y);
}

// acos with its argument clamped to [-1, 1] (a cosine rounded past 1 must not give NaN); NaN
// stays NaN.
template <class D, class V = hn::Vec<D>> HWY_INLINE V AcosClamped(D d, V x) {
  const V one = hn::Set(d, 1.0f);
  const V c = hn::Min(hn::Max(x, hn::Neg(one)), one);
  return hn::IfThenElse(hn::IsNaN(x), x, hn::Acos(d, c));
}

template <class D, class V = hn::Vec<D>> HWY_INLINE V LogF(D d, V x) { return hn::Log(d, x); }

// ---- row addressing ------------------------------------------------------------------------
//
// A row of d elements is d consecutive T for f32 (T = float) and bf16 (T = uint16_t, raw bits).
// A q8 row (T = lsh::Q8, pig/spec/kv_type.h) is d / 32 blocks of 34 bytes: a bf16 scale, then
// 32 int8. Rows are back to back; RowAt and RowBytes are the only kernel code that knows it.

using lsh::Q8;
using ::pig::spec::kQ8Block;
using ::pig::spec::kQ8BlockBytes;

template <typename T> HWY_INLINE constexpr std::size_t RowBytes(std::size_t d) {
  if constexpr (std::is_same_v<T, Q8>)
    return d / kQ8Block * kQ8BlockBytes;
  else
    return d * sizeof(T);
}
template <typename T> HWY_INLINE const T *RowAt(const T *base, std::size_t i, std::size_t d) {
  if constexpr (std::is_same_v<T, Q8>)
    return base + i * RowBytes<Q8>(d);
  else
    return base + i * d;
}

// Rows back to back from a base, or in pages (lsh::PagedRows): row i of a paged sequence is row
// i % page_rows of page pages[i / page_rows], page_stride bytes per page number from the base.
// The branch on the table is the same for every row of a call (predicted); a power-of-two page
// takes a shift and a mask instead of a division.
template <typename T> struct RowSource {
  const T *base = nullptr;
  std::size_t d = 0;
  const std::int32_t *pages = nullptr;
  std::size_t page_rows = 1, page_stride = 0, mask = 0;
  int shift = -1; // log2(page_rows) when it is a power of two

  RowSource() = default;
  RowSource(const void *b, std::size_t d_, const lsh::PagedRows &p)
      : base(static_cast<const T *>(b)), d(d_), pages(p.pages) {
    if (pages) {
      page_rows = p.page_rows;
      page_stride = p.page_stride;
      if ((page_rows & (page_rows - 1)) == 0) {
        shift = 0;
        while ((std::size_t(1) << shift) < page_rows)
          ++shift;
        mask = page_rows - 1;
      }
    }
  }
  HWY_INLINE const T *operator()(std::size_t i) const {
    if (!pages)
      return RowAt(base, i, d);
    std::size_t page, row;
    if (shift >= 0) {
      page = i >> shift;
      row = i & mask;
    } else {
      page = i / page_rows;
      row = i - page * page_rows;
    }
    const char *p =
        reinterpret_cast<const char *>(base) + static_cast<std::size_t>(pages[page]) * page_stride;
    return RowAt(reinterpret_cast<const T *>(p), row, d);
  }
  // Rows i, i + 1, ... that lie back to back from (*this)(i): to the end of row i's page (a
  // paged KV cache's block), every row when not paged. A loop over a run takes one address and
  // then steps by a row, as over contiguous rows.
  HWY_INLINE std::size_t RunFrom(std::size_t i) const {
    if (!pages)
      return ~std::size_t(0);
    return page_rows - (shift >= 0 ? (i & mask) : i % page_rows);
  }
};

// ---- row loads in kernel order ---------------------------------------------------------------

// Elements covered by whole vector pairs (2N elements, see LoadPair); the rest is a scalar tail.
// A q8 pair must lie inside one block (2N divides 32: every x86 target); wider vectors would take
// the scalar path.
template <typename T> HWY_INLINE std::size_t VectorPart(std::size_t d) {
  const std::size_t step = 2 * hn::Lanes(DF());
  if constexpr (std::is_same_v<T, Q8>)
    if (kQ8Block % step != 0)
      return 0;
  return d / step * step;
}

// Loads vector chunk pair `j` (elements [j*2N, j*2N+2N) for bf16, [j*2N, ...) as two f32
// vectors for f32 too) of a row: the two f32 vectors in kernel order.
HWY_INLINE void LoadPair(const float *HWY_RESTRICT row, std::size_t j, VF &a, VF &b) {
  const DF df;
  const std::size_t N = hn::Lanes(df);
  a = hn::LoadU(df, row + 2 * j * N);
  b = hn::LoadU(df, row + 2 * j * N + N);
}
HWY_INLINE void LoadPair(const std::uint16_t *HWY_RESTRICT row, std::size_t j, VF &a, VF &b) {
  const DF df;
  const DU du;
  const std::size_t N = hn::Lanes(df);
  // N u32 lanes = 2N bf16; u32 loads from a bf16 row (alignment 2 is enough for LoadU).
  const auto u = hn::LoadU(du, reinterpret_cast<const std::uint32_t *>(row) + j * N);
  a = hn::BitCast(df, hn::ShiftLeft<16>(u));
  b = hn::BitCast(df, hn::And(u, hn::Set(du, 0xFFFF0000u)));
}

// q8: elements [2jN, 2jN + 2N) lie in block 2jN / 32 (2N divides 32), in natural order (int8
// widening keeps lane order). LoadPairRaw gives the integers q as floats and PairScale the
// block's scale s; LoadPair gives q * s, exactly pig::ref::dequantize_q8's value. Kernels that
// can apply s to a scalar (a softmax weight, a block's partial dot product) take the raw pair.
HWY_INLINE const std::uint8_t *Q8BlockOf(const Q8 *row, std::size_t j) {
  const std::size_t e = 2 * j * hn::Lanes(DF());
  return reinterpret_cast<const std::uint8_t *>(row) + e / kQ8Block * kQ8BlockBytes;
}
HWY_INLINE float PairScale(const Q8 *HWY_RESTRICT row, std::size_t j) {
  std::uint16_t sbits;
  std::memcpy(&sbits, Q8BlockOf(row, j), 2);
  return Bf16ToF32(sbits);
}
HWY_INLINE void LoadPairRaw(const Q8 *HWY_RESTRICT row, std::size_t j, VF &a, VF &b) {
  const DF df;
  const DI di;
  const hn::Rebind<std::int8_t, DF> d8;
  const std::size_t N = hn::Lanes(df);
  const std::int8_t *q =
      reinterpret_cast<const std::int8_t *>(Q8BlockOf(row, j) + 2 + 2 * j * N % kQ8Block);
  a = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, q)));
  b = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, q + N)));
}
HWY_INLINE void LoadPair(const Q8 *HWY_RESTRICT row, std::size_t j, VF &a, VF &b) {
  const VF s = hn::Set(DF(), PairScale(row, j));
  LoadPairRaw(row, j, a, b);
  a = hn::Mul(a, s);
  b = hn::Mul(b, s);
}
// f32 and bf16 rows have no scale: the raw pair is the pair.
HWY_INLINE float PairScale(const float *, std::size_t) { return 1.0f; }
HWY_INLINE float PairScale(const std::uint16_t *, std::size_t) { return 1.0f; }
template <typename T>
HWY_INLINE void LoadPairRaw(const T *HWY_RESTRICT row, std::size_t j, VF &a, VF &b) {
  LoadPair(row, j, a, b);
}

HWY_INLINE float ScalarAt(const float *row, std::size_t i) { return row[i]; }
HWY_INLINE float ScalarAt(const std::uint16_t *row, std::size_t i) { return Bf16ToF32(row[i]); }
HWY_INLINE float ScalarAt(const Q8 *row, std::size_t i) {
  const std::uint8_t *blk =
      reinterpret_cast<const std::uint8_t *>(row) + i / kQ8Block * kQ8BlockBytes;
  std::uint16_t sbits;
  std::memcpy(&sbits, blk, 2);
  std::int8_t q;
  std::memcpy(&q, blk + 2 + i % kQ8Block, 1);
  return float(q) * Bf16ToF32(sbits);
}

// Kernel order of a natural-order vector x (d entries) for rows of type T: pairs of vector blocks
// [2jN, 2jN+2N) become (even elements, odd elements) for bf16; f32 is unchanged. Tail unchanged.
template <typename T>
HWY_INLINE void ToKernelOrder(const float *HWY_RESTRICT x, std::size_t d, float *HWY_RESTRICT y) {
  const std::size_t N = hn::Lanes(DF());
  const std::size_t dv = VectorPart<T>(d);
  if (sizeof(T) == 2) {
    for (std::size_t j = 0; j < dv; j += 2 * N)
      for (std::size_t i = 0; i < N; ++i) {
        y[j + i] = x[j + 2 * i];
        y[j + N + i] = x[j + 2 * i + 1];
      }
  } else {
    for (std::size_t j = 0; j < dv; ++j)
      y[j] = x[j];
  }
  for (std::size_t j = dv; j < d; ++j)
    y[j] = x[j];
}

template <typename T>
HWY_INLINE void FromKernelOrder(const float *HWY_RESTRICT y, std::size_t d, float *HWY_RESTRICT x) {
  const std::size_t N = hn::Lanes(DF());
  const std::size_t dv = VectorPart<T>(d);
  if (sizeof(T) == 2) {
    for (std::size_t j = 0; j < dv; j += 2 * N)
      for (std::size_t i = 0; i < N; ++i) {
        x[j + 2 * i] = y[j + i];
        x[j + 2 * i + 1] = y[j + N + i];
      }
  } else {
    for (std::size_t j = 0; j < dv; ++j)
      x[j] = y[j];
  }
  for (std::size_t j = dv; j < d; ++j)
    x[j] = y[j];
}

// Prefetch every cache line that [p, p + bytes) touches, starting from p's line: a range that
// starts inside a line can span one line more than stepping 64 bytes from p reaches (148 bytes
// at offset 60 of a line span 4 lines; the steps reach 3).
// The lines of [p, p + bytes) from the first line that starts at or after p: a row of a sequential
// pass whose first line the previous row's prefetch already covered (rows not a whole number of
// lines long, like q8's 68 and 136 bytes).
HWY_INLINE void PrefetchRowTail(const void *p, std::size_t bytes) {
  const uintptr_t first = (reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63);
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  for (uintptr_t line = first; line < end; line += 64)
    hwy::Prefetch(reinterpret_cast<const char *>(line));
}

HWY_INLINE void PrefetchRow(const void *p, std::size_t bytes) {
  if (bytes == 0)
    return;
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t(63);
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  for (uintptr_t line = first; line < end; line += 64)
    hwy::Prefetch(reinterpret_cast<const char *>(line));
}

} // namespace pig::runtime::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif // PIG_RUNTIME_KERNELS_SIMD_INL_H_ toggle
