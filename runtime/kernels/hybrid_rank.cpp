// The Hamming ranker's scan (hybrid_rank.h), compiled for every Highway target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/kernels/hybrid_rank.cpp"
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

// z[i] = scale ((sq kscale[i]) acc[i]) (+ log_vnorms[i]), NaN to -inf: ref::hybrid_scores's
// sc * dot8 in its order.
void QuantScores(const float *acc, const float *kscale, const double *log_vnorms, std::size_t n,
                 double sq, double scale, double *z) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  const std::size_t N = hn::Lanes(dd);
  const auto vsq = hn::Set(dd, sq), vscale = hn::Set(dd, scale);
  const auto ninf = hn::Set(dd, -std::numeric_limits<double>::infinity());
  std::size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto k = hn::PromoteTo(dd, hn::LoadU(df, kscale + i));
    const auto a = hn::PromoteTo(dd, hn::LoadU(df, acc + i));
    auto x = hn::Mul(vscale, hn::Mul(hn::Mul(vsq, k), a));
    if (log_vnorms)
      x = hn::Add(x, hn::LoadU(dd, log_vnorms + i));
    hn::StoreU(hn::IfThenElse(hn::IsNaN(x), ninf, x), dd, z + i);
  }
  for (; i < n; ++i) {
    double x = scale * (sq * double(kscale[i]) * double(acc[i]));
    if (log_vnorms)
      x += log_vnorms[i];
    z[i] = std::isnan(x) ? -std::numeric_limits<double>::infinity() : x;
  }
}

void QuantExtent(const float *acc, const float *kscale, std::size_t n, float *max, float *max_abs) {
  const hn::ScalableTag<float> df;
  const std::size_t N = hn::Lanes(df);
  const auto ninf = hn::Set(df, -std::numeric_limits<float>::infinity());
  auto mx = ninf, ma = hn::Zero(df);
  std::size_t i = 0;
  for (; i + N <= n; i += N) {
    auto p = hn::Mul(hn::LoadU(df, kscale + i), hn::LoadU(df, acc + i));
    p = hn::IfThenElse(hn::IsNaN(p), ninf, p); // NaN: neither the max nor a magnitude
    mx = hn::Max(mx, p);
    ma = hn::Max(ma, hn::IfThenElse(hn::Eq(p, ninf), hn::Zero(df), hn::Abs(p)));
  }
  float m = hn::GetLane(hn::MaxOfLanes(df, mx)), a = hn::GetLane(hn::MaxOfLanes(df, ma));
  for (; i < n; ++i) {
    const float p = kscale[i] * acc[i];
    if (std::isnan(p))
      continue;
    m = std::max(m, p);
    if (p != -std::numeric_limits<float>::infinity())
      a = std::max(a, std::abs(p));
  }
  *max = m;
  *max_abs = a;
}

std::size_t QuantAbove(const float *acc, const float *kscale, std::size_t n, float threshold,
                       std::uint32_t *ids) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const std::size_t N = hn::Lanes(df);
  const auto t = hn::Set(df, threshold);
  auto idx = hn::Iota(du, 0);
  const auto step = hn::Set(du, std::uint32_t(N));
  std::size_t count = 0, i = 0;
  for (; i + N <= n; i += N, idx = hn::Add(idx, step)) {
    const auto keep = hn::Ge(hn::Mul(hn::LoadU(df, kscale + i), hn::LoadU(df, acc + i)), t);
    if (!ids) {
      count += hn::CountTrue(df, keep);
      continue;
    }
    if (hn::AllFalse(df, keep))
      continue;
    count += hn::CompressBlendedStore(idx, hn::RebindMask(du, keep), du, ids + count);
  }
  for (; i < n; ++i)
    if (kscale[i] * acc[i] >= threshold) {
      if (ids)
        ids[count] = std::uint32_t(i);
      ++count;
    }
  return count;
}

// Per block of kQuantBlock tokens and per chunk of lanes: for each component pair, the lanes'
// bytes widened to i32, split into the two nibbles, converted to f32 (x + 8 in [1, 15]) and
// multiplied with each head's component (a broadcast); the offset 8 sum_j q_j is taken out at
// the end. All values are integers below 2^24, so every f32 sum is exact.
template <int G>
void QuantScanG(const std::uint8_t *keys, std::size_t half, std::size_t n, const float *qf,
                const float *offset, float *acc, std::size_t stride) {
  const hn::CappedTag<float, kQuantBlock> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<std::uint8_t, decltype(df)> d8;
  const std::size_t N = hn::Lanes(df);
  const auto low = hn::Set(di, 15);
  HWY_ALIGN float tmp[kQuantBlock];
  for (std::size_t blk = 0; blk * kQuantBlock < n; ++blk) {
    const std::uint8_t *b = keys + blk * kQuantBlock * half;
    for (std::size_t l0 = 0; l0 < kQuantBlock; l0 += N) {
      hn::Vec<decltype(df)> sum[G];
      for (int g = 0; g < G; ++g)
        sum[g] = hn::Zero(df);
      for (std::size_t p = 0; p < half; ++p) {
        const auto w = hn::PromoteTo(di, hn::LoadU(d8, b + p * kQuantBlock + l0));
        const auto lo = hn::ConvertTo(df, hn::And(w, low));
        const auto hi = hn::ConvertTo(df, hn::ShiftRight<4>(w));
        for (int g = 0; g < G; ++g) {
          const float *q = qf + std::size_t(g) * 2 * half + 2 * p;
          sum[g] = hn::MulAdd(lo, hn::Set(df, q[0]), sum[g]);
          sum[g] = hn::MulAdd(hi, hn::Set(df, q[1]), sum[g]);
        }
      }
      const std::size_t t0 = blk * kQuantBlock + l0;
      if (t0 >= n)
        break;
      const std::size_t valid = std::min(N, n - t0);
      for (int g = 0; g < G; ++g) {
        const auto r = hn::Sub(sum[g], hn::Set(df, offset[g]));
        float *out = acc + std::size_t(g) * stride + t0;
        if (valid == N) {
          hn::StoreU(r, df, out);
        } else {
          hn::Store(r, df, tmp);
          std::copy(tmp, tmp + valid, out);
        }
      }
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
#include <limits>
#include <vector>

namespace pig::runtime::lsh {

HWY_EXPORT(HammingScan);
HWY_EXPORT(HammingScores);
HWY_EXPORT(QuantScan);
HWY_EXPORT(QuantScores);
HWY_EXPORT(QuantExtent);
HWY_EXPORT(QuantAbove);

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

std::size_t hybrid_ranker_bytes(spec::HybridRank rank, int bits, int L, std::size_t d) {
  switch (rank) {
  case spec::HybridRank::hamming:
    return hybrid_sketch_words(bits) * 8;
  case spec::HybridRank::collisions:
    return std::size_t(L) * 2;
  case spec::HybridRank::quant:
    return hybrid_quant_bytes(d) + 4;
  case spec::HybridRank::lowrank:
    break;
  }
  return 0;
}

std::size_t hybrid_quant_size(std::size_t n, std::size_t d) {
  return (n + kQuantBlock - 1) / kQuantBlock * kQuantBlock * hybrid_quant_bytes(d);
}

namespace {
// std::lround(q) for |q| < 2^52 (rounding half away from zero), inline: q - trunc(q) is exact, so
// comparing it with 1/2 decides as lround does. libm's lround, a call per component, was ~40 % of
// lsh-hybrid's first step at 16k (Zen 5).
inline long RoundHalfAway(double q) {
  long t = long(q);
  const double f = q - double(t);
  if (f >= 0.5)
    ++t;
  else if (f <= -0.5)
    --t;
  return t;
}
} // namespace

float hybrid_quant_pack(const float *c, std::size_t d, std::size_t token, std::uint8_t *keys) {
  const std::size_t half = hybrid_quant_bytes(d);
  std::uint8_t *b = keys + token / kQuantBlock * kQuantBlock * half + token % kQuantBlock;
  // ref::HybridLowRank::round_key(c, 4), without its allocations: one scale max |c_j| / 7 (f32),
  // each component lround(c_j / scale) in double, clamped to [-7, 7]; a non-finite component
  // makes the scale NaN and every code 0, a zero key scale 0 and codes 0.
  constexpr int kTop = 7;
  float m = 0;
  bool finite = true;
  for (std::size_t j = 0; j < d; ++j) {
    finite = finite && std::isfinite(c[j]);
    m = std::max(m, std::fabs(c[j]));
  }
  const float scale = !finite ? std::numeric_limits<float>::quiet_NaN() : m / float(kTop);
  const bool codes = finite && m > 0; // zero (codes 0) or NaN (codes 0, score NaN): all 8
  auto code = [&](std::size_t j) {
    if (!codes || j >= d)
      return 0;
    return int(std::clamp<long>(RoundHalfAway(double(c[j]) / double(scale)), -kTop, kTop));
  };
  for (std::size_t p = 0; p < half; ++p)
    b[p * kQuantBlock] = std::uint8_t((code(2 * p) + 8) | (code(2 * p + 1) + 8) << 4);
  return m > 0 || !finite ? scale : 0.0f;
}

void hybrid_quant_scores(const float *acc, const float *kscale, const double *log_vnorms,
                         std::size_t n, double sq, double scale, double *z) {
  HWY_DYNAMIC_DISPATCH(QuantScores)(acc, kscale, log_vnorms, n, sq, scale, z);
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

void hybrid_quant_extent(const float *acc, const float *kscale, std::size_t n, float *max,
                         float *max_abs) {
  HWY_DYNAMIC_DISPATCH(QuantExtent)(acc, kscale, n, max, max_abs);
}

std::size_t hybrid_quant_above(const float *acc, const float *kscale, std::size_t n,
                               float threshold, std::uint32_t *ids) {
  return HWY_DYNAMIC_DISPATCH(QuantAbove)(acc, kscale, n, threshold, ids);
}

} // namespace pig::runtime::lsh
#endif
