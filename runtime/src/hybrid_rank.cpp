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

} // namespace pig::runtime::lsh::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace pig::runtime::lsh {

HWY_EXPORT(HammingScan);
HWY_EXPORT(HammingScores);

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

} // namespace pig::runtime::lsh
#endif
