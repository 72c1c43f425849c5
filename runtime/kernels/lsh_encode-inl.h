// LSH kernels, encode family (per Highway target): the SimHash codes of queries and keys, equal to
// pig::ref::encode bit for bit (EncodeArgs, lsh_kernels.h).

#if defined(PIG_RUNTIME_KERNELS_LSH_ENCODE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PIG_RUNTIME_KERNELS_LSH_ENCODE_INL_H_
#undef PIG_RUNTIME_KERNELS_LSH_ENCODE_INL_H_
#else
#define PIG_RUNTIME_KERNELS_LSH_ENCODE_INL_H_
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "hwy/base.h"
#include "hwy/highway.h"
#include "pig/runtime/lsh_kernels.h"
#include "runtime/kernels/lsh_common-inl.h"
#include "runtime/kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace pig::runtime::lsh::HWY_NAMESPACE {

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
  // |x|^2 in double lanes (the serial sum was a chain of d dependent adds, ~10 % of an encode,
  // Zen 5): any order serves, the value only bounds the rounding error, and the bound has slack.
  const hn::ScalableTag<double> dd;
  const std::size_t ND = hn::Lanes(dd);
  auto vxx = hn::Zero(dd);
  const std::size_t d_vec = d / ND * ND;
  for (std::size_t k = 0; k < d_vec; k += ND) {
    const auto v = hn::PromoteTo(dd, hn::LoadU(hn::Rebind<float, decltype(dd)>(), x + k));
    vxx = hn::MulAdd(v, v, vxx);
  }
  double xx = hn::GetLane(hn::SumOfLanes(dd, vxx));
  for (std::size_t k = d_vec; k < d; ++k)
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
  // Code l is bits [l K, l K + K): one unaligned 8-byte load at its first byte holds it
  // (shift <= 7, K <= 16), so no branch on a code that straddles two words. bits has a spare
  // word past the last code's, which the loads may read.
  static_assert(std::endian::native == std::endian::little, "bit c is bit c % 8 of byte c / 8");
  const unsigned kmask = (1u << K) - 1u;
  const auto *bytes = reinterpret_cast<const unsigned char *>(bits);
  for (std::size_t l = 0, start = 0; l < L; ++l, start += K) {
    uint64_t v;
    std::memcpy(&v, bytes + start / 8, sizeof v);
    codes[l] = uint16_t(unsigned(v >> (start % 8)) & kmask);
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
  const sd::RowSource<Row> rows(a.x, d, a.paged);
  for (std::size_t r0 = 0; r0 < a.rows; r0 += R) {
    const std::size_t nr = std::min(R, a.rows - r0);
    for (std::size_t r = 0; r < nr; ++r) {
      const Row *src = rows(a.first + r0 + r);
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

// Queries are f32 and keys are of the set's dtype, so encode serves both whatever T is.
template <int kK, int kL, int kD, typename T> void Encode(const EncodeArgs &a) {
  if (a.dtype == DType::f32)
    EncodeTyped<kK, kL, kD, float>(a);
  else if (a.dtype == DType::q8)
    EncodeTyped<kK, kL, kD, Q8>(a);
  else
    EncodeTyped<kK, kL, kD, uint16_t>(a);
}

} // namespace pig::runtime::lsh::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif // PIG_RUNTIME_KERNELS_LSH_ENCODE_INL_H_ toggle
