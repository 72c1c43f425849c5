// The Hamming ranker's scan (hybrid_rank.h), compiled for every Highway target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/src/hybrid_rank.cpp"
#include "hwy/foreach_target.h" // IWYU pragma: keep

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "hwy/highway.h"
#include "pig/runtime/hybrid_rank.h"

HWY_BEFORE_NAMESPACE();
namespace pig::runtime::lsh::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One token's words are read once and compared with every head's query (kept in L1): the
// sketches stream through memory once per call whatever G is.
void HammingScan(const std::uint64_t *sketches, std::size_t words, std::size_t n,
                 const std::uint64_t *queries, int G, std::uint16_t *H, std::size_t stride) {
  const hn::ScalableTag<std::uint64_t> d;
  const std::size_t N = hn::Lanes(d), full = words - words % N;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t *t = sketches + i * words;
    for (int g = 0; g < G; ++g) {
      const std::uint64_t *q = queries + std::size_t(g) * words;
      auto acc = hn::Zero(d);
      for (std::size_t w = 0; w < full; w += N)
        acc = hn::Add(acc, hn::PopulationCount(hn::Xor(hn::LoadU(d, t + w), hn::LoadU(d, q + w))));
      std::uint64_t h = hn::GetLane(hn::SumOfLanes(d, acc));
      for (std::size_t w = full; w < words; ++w) // none when N divides words (up to 512 bits)
        h += std::uint64_t(std::popcount(t[w] ^ q[w]));
      H[std::size_t(g) * stride + i] = std::uint16_t(h);
    }
  }
}

// z[i] = sq norms[i] cos_of[H[i]] (+ log_vnorms[i]), NaN to -inf: the reference's operations in
// its order, the cosine gathered from the table.
void HammingScores(const std::uint16_t *H, const double *norms, const double *log_vnorms,
                   std::size_t n, const double *cos_of, double sq, double *z) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<std::uint16_t, decltype(dd)> d16;
  const hn::Rebind<std::uint32_t, decltype(dd)> d32;
  const hn::Rebind<std::uint64_t, decltype(dd)> d64;
  const hn::Rebind<std::int64_t, decltype(dd)> di;
  const std::size_t N = hn::Lanes(dd);
  const auto vsq = hn::Set(dd, sq), ninf = hn::Set(dd, -std::numeric_limits<double>::infinity());
  std::size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto idx = hn::BitCast(di, hn::PromoteTo(d64, hn::PromoteTo(d32, hn::LoadU(d16, H + i))));
    auto x = hn::Mul(hn::Mul(vsq, hn::LoadU(dd, norms + i)), hn::GatherIndex(dd, cos_of, idx));
    if (log_vnorms)
      x = hn::Add(x, hn::LoadU(dd, log_vnorms + i));
    hn::StoreU(hn::IfThenElse(hn::IsNaN(x), ninf, x), dd, z + i);
  }
  for (; i < n; ++i) {
    double x = sq * norms[i] * cos_of[H[i]];
    if (log_vnorms)
      x += log_vnorms[i];
    z[i] = std::isnan(x) ? -std::numeric_limits<double>::infinity() : x;
  }
}

// One token's packed bytes are read once and multiplied with every head's query. The nibbles are
// widened to i32 and converted to f32 (x + 8 in [1, 15]); the offset is taken out at the end as
// 8 sum_j q_j. All values are integers, so every f32 sum is exact.
template <int G>
void QuantScanG(const std::uint8_t *keys, std::size_t half, std::size_t n, const float *qf,
                const float *offset, float *acc, std::size_t stride) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<std::uint8_t, decltype(df)> d8;
  const std::size_t N = hn::Lanes(df), full = half - half % N;
  const auto low = hn::Set(d8, std::uint8_t{15});
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t *row = keys + i * half;
    hn::Vec<decltype(df)> sum[G];
    for (int g = 0; g < G; ++g)
      sum[g] = hn::Zero(df);
    std::size_t j = 0;
    for (; j < full; j += N) {
      const auto b = hn::LoadU(d8, row + j);
      const auto lo = hn::ConvertTo(df, hn::BitCast(di, hn::PromoteTo(di, hn::And(b, low))));
      const auto hi = hn::ConvertTo(df, hn::BitCast(di, hn::PromoteTo(di, hn::ShiftRight<4>(b))));
      for (int g = 0; g < G; ++g) {
        const float *q = qf + std::size_t(g) * 2 * half;
        sum[g] = hn::MulAdd(lo, hn::LoadU(df, q + j), sum[g]);
        sum[g] = hn::MulAdd(hi, hn::LoadU(df, q + half + j), sum[g]);
      }
    }
    for (int g = 0; g < G; ++g) {
      const float *q = qf + std::size_t(g) * 2 * half;
      float x = hn::GetLane(hn::SumOfLanes(df, sum[g]));
      for (std::size_t t = j; t < half; ++t)
        x += float(row[t] & 15) * q[t] + float(row[t] >> 4) * q[half + t];
      acc[std::size_t(g) * stride + i] = x - offset[g];
    }
  }
}

void QuantScan(const std::uint8_t *keys, std::size_t half, std::size_t n, const float *qf, int G,
               const float *offset, float *acc, std::size_t stride) {
  int g = 0;
  for (; g + 3 <= G; g += 3)
    QuantScanG<3>(keys, half, n, qf + std::size_t(g) * 2 * half, offset + g,
                  acc + std::size_t(g) * stride, stride);
  for (; g < G; ++g)
    QuantScanG<1>(keys, half, n, qf + std::size_t(g) * 2 * half, offset + g,
                  acc + std::size_t(g) * stride, stride);
}

} // namespace pig::runtime::lsh::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <vector>

#include "pig/reference/hybrid.h" // HybridLowRank::round_key: the reference's rounding

namespace pig::runtime::lsh {

HWY_EXPORT(HammingScan);
HWY_EXPORT(HammingScores);
HWY_EXPORT(QuantScan);

std::size_t hybrid_sketch_words(int bits) {
  const std::size_t w = (std::size_t(bits) + 63) / 64;
  return (w + 7) / 8 * 8;
}

void hybrid_pack(const std::uint16_t *codes, std::size_t rows, int K, int L, int bits,
                 std::uint64_t *out) {
  const std::size_t words = hybrid_sketch_words(bits);
  for (std::size_t r = 0; r < rows; ++r) {
    std::uint64_t *o = out + r * words;
    for (std::size_t w = 0; w < words; ++w)
      o[w] = 0;
    const std::uint16_t *c = codes + r * std::size_t(L);
    // K bits per table at bit offset l K; the last table may be cut to bits % K.
    for (int l = 0; l * K < bits; ++l) {
      const int off = l * K, take = std::min(K, bits - off);
      const std::uint64_t v = std::uint64_t(c[l]) & ((std::uint64_t(1) << take) - 1);
      o[off / 64] |= v << (off % 64);
      if (off % 64 + take > 64) // straddles two words
        o[off / 64 + 1] |= v >> (64 - off % 64);
    }
  }
}

void hybrid_hamming_scan(const std::uint64_t *sketches, std::size_t words, std::size_t n,
                         const std::uint64_t *queries, int G, std::uint16_t *H,
                         std::size_t stride) {
  HWY_DYNAMIC_DISPATCH(HammingScan)(sketches, words, n, queries, G, H, stride ? stride : n);
}

void hybrid_hamming_scores(const std::uint16_t *H, const double *norms, const double *log_vnorms,
                           std::size_t n, const double *cos_of, double sq, double *z) {
  HWY_DYNAMIC_DISPATCH(HammingScores)(H, norms, log_vnorms, n, cos_of, sq, z);
}

std::size_t hybrid_quant_bytes(std::size_t d) { return (d + 1) / 2; }

float hybrid_quant_pack(const float *c, std::size_t d, std::uint8_t *out) {
  const std::size_t half = hybrid_quant_bytes(d);
  std::fill(out, out + half, std::uint8_t{8 | 8 << 4});
  const ref::HybridLowRank::Key k = ref::HybridLowRank::round_key(std::vector<float>(c, c + d), 4);
  if (!(k.scale > 0)) // zero (codes 0) or NaN (codes 0, score NaN)
    return k.scale;
  for (std::size_t j = 0; j < d; ++j) {
    const std::uint8_t x = std::uint8_t(k.x[j] + 8);
    if (j < half)
      out[j] = std::uint8_t((out[j] & 0xF0) | x);
    else
      out[j - half] = std::uint8_t((out[j - half] & 0x0F) | x << 4);
  }
  return k.scale;
}

void hybrid_quant_scan(const std::uint8_t *keys, std::size_t d, std::size_t n, const float *qf,
                       int G, float *acc, std::size_t stride) {
  const std::size_t half = hybrid_quant_bytes(d);
  // 8 sum_j q_j per head: the nibbles' offset (exact: an integer below 2^24).
  std::vector<float> offset(std::size_t(G), 0.0f);
  for (int g = 0; g < G; ++g)
    for (std::size_t j = 0; j < 2 * half; ++j)
      offset[std::size_t(g)] += 8.0f * qf[std::size_t(g) * 2 * half + j];
  HWY_DYNAMIC_DISPATCH(QuantScan)(keys, half, n, qf, G, offset.data(), acc, stride ? stride : n);
}

} // namespace pig::runtime::lsh
#endif
