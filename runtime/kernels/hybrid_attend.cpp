// lsh-hybrid's weighted softmax over gathered rows (hybrid_select.h: hybrid_attend), compiled for
// every Highway target: each logit a dot product in f64 lanes (every product of two floats is
// exact in double, so only the order of the sum differs from the reference's), the values
// accumulated in f64 lanes.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/kernels/hybrid_attend.cpp"
#include "hwy/foreach_target.h" // IWYU pragma: keep

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "pig/runtime/hybrid_select.h"

HWY_BEFORE_NAMESPACE();
namespace pig::runtime::lsh::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// N elements of a row from offset j, as f64 lanes: bf16 widened by a shift, f32 promoted.
template <bool kBf16, class DD>
HWY_INLINE hn::Vec<DD> LoadRow(DD dd, const void *row, std::size_t j) {
  const hn::Rebind<float, DD> df;
  if constexpr (kBf16) {
    const hn::Rebind<std::uint16_t, DD> d16;
    const hn::Rebind<std::uint32_t, DD> d32;
    const auto bits =
        hn::PromoteTo(d32, hn::LoadU(d16, static_cast<const std::uint16_t *>(row) + j));
    return hn::PromoteTo(dd, hn::BitCast(df, hn::ShiftLeft<16>(bits)));
  } else {
    return hn::PromoteTo(dd, hn::LoadU(df, static_cast<const float *>(row) + j));
  }
}

// The gathered rows come from anywhere in the cache (DRAM at long contexts): the loops below ask
// for the row kAhead positions on while they work on this one, every cache line of it.
constexpr std::size_t kAhead = 8;
HWY_INLINE void PrefetchRow(const void *base, std::uint32_t id, std::size_t row_bytes) {
  const char *row = static_cast<const char *>(base) + std::size_t(id) * row_bytes;
  for (std::size_t off = 0; off < row_bytes; off += 64)
    hwy::Prefetch(row + off);
}

template <bool kBf16> float ElementOf(const void *row, std::size_t j) {
  if constexpr (kBf16)
    return std::bit_cast<float>(std::uint32_t(static_cast<const std::uint16_t *>(row)[j]) << 16);
  else
    return static_cast<const float *>(row)[j];
}

// z[c] = scale q.k_{ids[c]} - bias[c], q given in double (qd).
template <bool kBf16>
void RowLogits(const double *qd, const void *K, std::size_t d, double scale,
               const std::uint32_t *ids, const double *bias, std::size_t count, double *z) {
  const hn::ScalableTag<double> dd;
  const std::size_t N = hn::Lanes(dd), full = d - d % N, esize = kBf16 ? 2 : 4;
  for (std::size_t c = 0; c < count; ++c) {
    if (c + kAhead < count)
      PrefetchRow(K, ids[c + kAhead], d * esize);
    const void *row = static_cast<const char *>(K) + std::size_t(ids[c]) * d * esize;
    auto a0 = hn::Zero(dd), a1 = hn::Zero(dd);
    std::size_t j = 0;
    for (; j + 2 * N <= full; j += 2 * N) {
      a0 = hn::MulAdd(hn::LoadU(dd, qd + j), LoadRow<kBf16>(dd, row, j), a0);
      a1 = hn::MulAdd(hn::LoadU(dd, qd + j + N), LoadRow<kBf16>(dd, row, j + N), a1);
    }
    for (; j < full; j += N)
      a0 = hn::MulAdd(hn::LoadU(dd, qd + j), LoadRow<kBf16>(dd, row, j), a0);
    double s = hn::GetLane(hn::SumOfLanes(dd, hn::Add(a0, a1)));
    for (; j < d; ++j)
      s += qd[j] * double(ElementOf<kBf16>(row, j));
    z[c] = scale * s - bias[c];
  }
}

// acc[0, d) = sum_c w[c] v_{ids[c]}.
template <bool kBf16>
void AccumulateValues(const void *V, std::size_t d, const std::uint32_t *ids, const double *w,
                      std::size_t count, double *acc) {
  const hn::ScalableTag<double> dd;
  const std::size_t N = hn::Lanes(dd), full = d - d % N, esize = kBf16 ? 2 : 4;
  std::fill(acc, acc + d, 0.0);
  for (std::size_t c = 0; c < count; ++c) {
    if (c + kAhead < count)
      PrefetchRow(V, ids[c + kAhead], d * esize);
    const void *row = static_cast<const char *>(V) + std::size_t(ids[c]) * d * esize;
    const auto wc = hn::Set(dd, w[c]);
    std::size_t j = 0;
    for (; j < full; j += N)
      hn::StoreU(hn::MulAdd(wc, LoadRow<kBf16>(dd, row, j), hn::LoadU(dd, acc + j)), dd, acc + j);
    for (; j < d; ++j)
      acc[j] += w[c] * double(ElementOf<kBf16>(row, j));
  }
}

void LogitsBf16(const double *qd, const void *K, std::size_t d, double scale,
                const std::uint32_t *ids, const double *bias, std::size_t count, double *z) {
  RowLogits<true>(qd, K, d, scale, ids, bias, count, z);
}
void LogitsF32(const double *qd, const void *K, std::size_t d, double scale,
               const std::uint32_t *ids, const double *bias, std::size_t count, double *z) {
  RowLogits<false>(qd, K, d, scale, ids, bias, count, z);
}
void ValuesBf16(const void *V, std::size_t d, const std::uint32_t *ids, const double *w,
                std::size_t count, double *acc) {
  AccumulateValues<true>(V, d, ids, w, count, acc);
}
void ValuesF32(const void *V, std::size_t d, const std::uint32_t *ids, const double *w,
               std::size_t count, double *acc) {
  AccumulateValues<false>(V, d, ids, w, count, acc);
}

} // namespace pig::runtime::lsh::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "pig/reference/kv_quant.h" // q8 rows

namespace pig::runtime::lsh {

HWY_EXPORT(LogitsBf16);
HWY_EXPORT(LogitsF32);
HWY_EXPORT(ValuesBf16);
HWY_EXPORT(ValuesF32);

double hybrid_attend(const float *q, const void *K, const void *V, DType dtype, std::size_t d,
                     double scale, const std::uint32_t *ids, const double *bias, std::size_t count,
                     float *out, double *logits, const PagedRows &paged) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  thread_local std::vector<double> qd, z, acc;
  thread_local std::vector<float> kq, vq;        // q8: the gathered rows, dequantised
  thread_local std::vector<std::uint8_t> kp, vp; // rows in pages: the gathered rows, copied
  thread_local std::vector<std::uint32_t> seq;
  qd.assign(q, q + d);
  z.resize(count);
  const bool bf16 = dtype == DType::bf16;
  if (paged.paged()) { // gather the selected rows (a few % of the tokens) back to back, bit for bit
    const std::size_t rb = row_bytes(dtype, d);
    kp.resize(count * rb);
    vp.resize(count * rb);
    seq.resize(count);
    for (std::size_t c = 0; c < count; ++c) {
      std::memcpy(kp.data() + c * rb, row_address(K, dtype, d, paged, ids[c]), rb);
      std::memcpy(vp.data() + c * rb, row_address(V, dtype, d, paged, ids[c]), rb);
      seq[c] = std::uint32_t(c);
    }
    K = kp.data();
    V = vp.data();
    ids = seq.data();
  }
  if (dtype == DType::q8) { // dequantise the gathered rows once, then the f32 kernels on them
    const std::size_t rb = ref::q8_row_bytes(d);
    kq.resize(count * d);
    vq.resize(count * d);
    seq.resize(count);
    for (std::size_t c = 0; c < count; ++c) {
      if (c + 8 < count) // the row 8 on, as the kernels below do (rb bytes, not 64-aligned)
        for (const void *base : {K, V}) {
          const char *row = static_cast<const char *>(base) + std::size_t(ids[c + 8]) * rb;
          hwy::Prefetch(row);
          hwy::Prefetch(row + rb - 1);
        }
      ref::dequantize_q8(static_cast<const std::uint8_t *>(K) + std::size_t(ids[c]) * rb, d,
                         kq.data() + c * d);
      ref::dequantize_q8(static_cast<const std::uint8_t *>(V) + std::size_t(ids[c]) * rb, d,
                         vq.data() + c * d);
      seq[c] = std::uint32_t(c);
    }
    K = kq.data();
    V = vq.data();
    ids = seq.data();
  }
  if (bf16)
    HWY_DYNAMIC_DISPATCH(LogitsBf16)(qd.data(), K, d, scale, ids, bias, count, z.data());
  else
    HWY_DYNAMIC_DISPATCH(LogitsF32)(qd.data(), K, d, scale, ids, bias, count, z.data());
  if (logits)
    std::copy(z.begin(), z.end(), logits);
  // The reference's softmax_values: weights relative to the largest non-NaN logit; a NaN logit
  // makes the output and the lse NaN, no finite logit makes them 0 and -inf.
  double m = -kInf;
  for (double x : z)
    if (x > m)
      m = x;
  if (m == -kInf) {
    double lse = -kInf;
    std::fill(out, out + d, 0.0f);
    for (double x : z)
      if (std::isnan(x)) {
        lse = x;
        std::fill(out, out + d, std::numeric_limits<float>::quiet_NaN());
      }
    return lse;
  }
  double sum = 0;
  for (double &x : z)
    sum += (x = std::exp(x - m));
  for (double &x : z)
    x /= sum;
  acc.resize(d);
  if (bf16)
    HWY_DYNAMIC_DISPATCH(ValuesBf16)(V, d, ids, z.data(), count, acc.data());
  else
    HWY_DYNAMIC_DISPATCH(ValuesF32)(V, d, ids, z.data(), count, acc.data());
  for (std::size_t j = 0; j < d; ++j)
    out[j] = float(acc[j]);
  return m + std::log(sum);
}

} // namespace pig::runtime::lsh
#endif // HWY_ONCE
