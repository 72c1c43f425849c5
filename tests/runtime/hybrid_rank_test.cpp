// lsh-hybrid's Hamming scan (pig/runtime/hybrid_rank.h) on every compiled Highway target against
// pig::ref::hybrid_hamming: packed sketches of random codes, codes that straddle words, partial
// last tables (bits % K != 0), G = 1 and 3, and the extremes (all bits equal, all differ).
#include "pig/runtime/hybrid_rank.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../kernels/test_util.h" // pig::test::for_each_target
#include "pig/reference/hybrid.h"
#include "pig/reference/random.h"

namespace pig::runtime::lsh {
namespace {

// Once per compiled Highway target this CPU supports (tests/kernels/test_util.h).
void for_each_target(const std::function<void()> &fn) {
  pig::test::for_each_target([&](const char *) { fn(); });
}

TEST(HybridRank, ScanCountsTheReferencesHammingDistances) {
  struct Case {
    int K, L, bits;
  };
  for (const Case c : {Case{10, 150, 1500}, Case{10, 150, 512}, Case{10, 150, 37}, Case{7, 20, 140},
                       Case{16, 9, 144}, Case{1, 1, 1}}) {
    SCOPED_TRACE("K=" + std::to_string(c.K) + " L=" + std::to_string(c.L) +
                 " bits=" + std::to_string(c.bits));
    ref::Rng rng(std::uint64_t(c.K * 1000 + c.bits));
    const std::size_t n = 203, words = hybrid_sketch_words(c.bits);
    ASSERT_EQ(words % 8, 0u);
    ASSERT_GE(words * 64, std::size_t(c.bits));
    const std::uint16_t mask = std::uint16_t((1u << c.K) - 1);
    std::vector<std::uint16_t> codes(n * std::size_t(c.L)), qcodes(3 * std::size_t(c.L));
    for (auto &x : codes)
      x = std::uint16_t(rng.below(1u << c.K));
    for (auto &x : qcodes)
      x = std::uint16_t(rng.below(1u << c.K));
    for (int l = 0; l < c.L; ++l) { // token 0 equals head 0; token 1 is its complement
      codes[std::size_t(l)] = qcodes[std::size_t(l)];
      codes[std::size_t(c.L + l)] = std::uint16_t(~qcodes[std::size_t(l)] & mask);
    }
    std::vector<std::uint64_t> sketch(n * words), q(3 * words);
    hybrid_pack(codes.data(), n, c.K, c.L, c.bits, sketch.data());
    hybrid_pack(qcodes.data(), 3, c.K, c.L, c.bits, q.data());
    for_each_target([&] {
      for (int G : {1, 3}) {
        std::vector<std::uint16_t> H(std::size_t(G) * n, 0xffff);
        hybrid_hamming_scan(sketch.data(), words, n, q.data(), G, H.data());
        for (int g = 0; g < G; ++g)
          for (std::size_t i = 0; i < n; ++i)
            ASSERT_EQ(H[std::size_t(g) * n + i],
                      ref::hybrid_hamming(c.bits, c.K, &codes[i * std::size_t(c.L)],
                                          &qcodes[std::size_t(g) * std::size_t(c.L)]))
                << "token " << i << " head " << g;
        EXPECT_EQ(H[0], 0);
        EXPECT_EQ(H[1], c.bits);
        // In chunks of tokens (as the runtime splits it over threads): the same H.
        std::vector<std::uint16_t> Hc(std::size_t(G) * n, 0xffff);
        const std::size_t cuts[] = {0, 61, 64, n};
        for (int k = 0; k < 3; ++k)
          hybrid_hamming_scan(sketch.data() + cuts[k] * words, words, cuts[k + 1] - cuts[k],
                              q.data(), G, Hc.data() + cuts[k], n);
        EXPECT_EQ(Hc, H);
      }
    });
  }
}

// The scores from the scan's distances: the same doubles as the scalar formula of
// ref::hybrid_scores (sq |k~| cos^, + log |v|), on every target; NaN (a NaN or infinite norm
// times a zero cosine) becomes -inf; lengths with a vector remainder.
TEST(HybridRank, ScoresAreTheFormulasDoubles) {
  const int B = 1500;
  std::vector<double> cos_of(B + 1);
  for (int x = 0; x <= B; ++x)
    cos_of[std::size_t(x)] = ref::hamming_cosine(x, B);
  ref::Rng rng(5);
  const std::size_t n = 203;
  std::vector<std::uint16_t> H(n);
  std::vector<double> norms(n), logv(n);
  for (std::size_t i = 0; i < n; ++i) {
    H[i] = std::uint16_t(rng.below(B + 1));
    norms[i] = 10 * rng.uniform();
    logv[i] = rng.gaussian();
  }
  H[3] = B / 2;                                       // cos exactly 0 ...
  norms[3] = std::numeric_limits<double>::infinity(); // ... times inf: NaN
  norms[4] = std::numeric_limits<double>::quiet_NaN();
  H[5] = 0;
  H[6] = B;
  const double sq = 0.37;
  for_each_target([&] {
    for (bool vnorm : {false, true})
      for (std::size_t len : {n, std::size_t{7}, std::size_t{0}}) {
        std::vector<double> z(len + 1, 12345.0);
        hybrid_hamming_scores(H.data(), norms.data(), vnorm ? logv.data() : nullptr, len,
                              cos_of.data(), sq, z.data());
        for (std::size_t i = 0; i < len; ++i) {
          double want = sq * norms[i] * cos_of[H[i]];
          if (vnorm)
            want += logv[i];
          if (std::isnan(want))
            want = -std::numeric_limits<double>::infinity();
          ASSERT_EQ(z[i], want) << "token " << i << " vnorm " << vnorm;
        }
        EXPECT_EQ(z[len], 12345.0); // nothing written past n
      }
  });
}

} // namespace
} // namespace pig::runtime::lsh

namespace pig::runtime::lsh {
namespace {

// rank=quant's scan: the packed int4 keys' integer dot products with int8 queries equal
// ref::HybridLowRank::dot8's (divided by the scales) on every target, for G = 1, 2, 3 and 4, odd
// and even d (a missing high nibble), d not a multiple of any vector width, the extremes (every
// component at +-7 and +-127), a zero key (scale 0), a non-finite one (scale NaN) and a chunk of a
// longer scan (stride).
TEST(HybridRank, QuantScanGivesTheReferencesIntegers) {
  for (std::size_t d : {64, 128, 33, 7, 1}) {
    SCOPED_TRACE("d=" + std::to_string(d));
    ref::Rng rng(d);
    const std::size_t n = 157, qb = hybrid_quant_bytes(d);
    ASSERT_EQ(qb, (d + 1) / 2);
    std::vector<std::vector<float>> keys(n, std::vector<float>(d));
    for (auto &k : keys)
      for (float &x : k)
        x = float(rng.gaussian() * 3.0);
    for (std::size_t j = 0; j < d; ++j) {
      keys[0][j] = j % 2 ? 5.0f : -5.0f; // every component at +-7
      keys[1][j] = 0.0f;                 // zero key
    }
    keys[2][d / 2] = std::numeric_limits<float>::infinity();
    std::vector<std::uint8_t> packed(hybrid_quant_size(n, d));
    ASSERT_EQ(packed.size(), 160 * qb); // whole blocks of 16
    std::vector<ref::HybridLowRank::Key> want(n);
    for (std::size_t i = 0; i < n; ++i) {
      want[i] = ref::HybridLowRank::round_key(keys[i], 4);
      const float s = hybrid_quant_pack(keys[i].data(), d, i, packed.data());
      if (std::isnan(want[i].scale))
        EXPECT_TRUE(std::isnan(s));
      else
        EXPECT_EQ(s, want[i].scale) << i;
    }
    EXPECT_EQ(want[1].scale, 0.0f);
    const int Gmax = 4;
    std::vector<ref::HybridLowRank::Key> q(Gmax);
    std::vector<float> qf(std::size_t(Gmax) * 2 * qb, 0.0f);
    for (int g = 0; g < Gmax; ++g) {
      std::vector<float> v(d);
      for (std::size_t j = 0; j < d; ++j)
        v[j] = g == 0 ? (j % 3 ? 1.0f : -1.0f) : float(rng.gaussian()); // head 0: every +-127
      q[std::size_t(g)] = ref::HybridLowRank::query8(v);
      for (std::size_t j = 0; j < d; ++j)
        qf[std::size_t(g) * 2 * qb + j] = float(q[std::size_t(g)].x[j]);
    }
    for_each_target([&] {
      for (int G : {1, 2, 3, 4}) {
        std::vector<float> acc(std::size_t(G) * n, -1.0f);
        hybrid_quant_scan(packed.data(), d, n, qf.data(), G, acc.data());
        // The second half of the tokens as a chunk of the same scan.
        const std::size_t a = 4 * kQuantBlock; // a block's first token
        std::vector<float> chunk(std::size_t(G) * n, -1.0f);
        hybrid_quant_scan(packed.data() + hybrid_quant_size(a, d), d, n - a, qf.data(), G,
                          chunk.data() + a, n);
        for (int g = 0; g < G; ++g)
          for (std::size_t i = 0; i < n; ++i) {
            std::int64_t dot = 0; // sum_j y_j x_j, the integer of dot8
            for (std::size_t j = 0; j < d; ++j)
              dot += std::int64_t(q[std::size_t(g)].x[j]) * std::int64_t(want[i].x[j]);
            ASSERT_EQ(acc[std::size_t(g) * n + i], float(dot))
                << "G=" << G << " g=" << g << " i=" << i;
            if (i >= a) {
              ASSERT_EQ(chunk[std::size_t(g) * n + i], float(dot)) << "chunk i=" << i;
            }
          }
      }
    });
  }
}

// rank=quant's scores: ref::hybrid_scores's sc * dot8 = scale ((s_q s_k) acc) (+ log |v|), NaN
// (a non-finite key's scale) to -inf, the same doubles on every target; lengths that leave a
// remainder, and 0.
// hybrid_quant_pack rounds as ref::HybridLowRank::round_key(c, 4), nibble for nibble: random keys,
// components exactly halfway between two codes (lround rounds them away from zero), just below
// halfway, negative zero, huge and tiny keys, a zero key and non-finite components.
TEST(HybridRank, QuantPackRoundsAsTheReference) {
  ref::Rng rng(5);
  std::vector<std::vector<float>> keys;
  for (std::size_t d : {64, 33, 8, 1})
    for (int r = 0; r < 40; ++r) {
      std::vector<float> k(d);
      for (float &x : k)
        x = float(rng.gaussian() * (r % 3 == 0 ? 1e30 : r % 3 == 1 ? 1e-30 : 2.0));
      keys.push_back(k);
    }
  // Scale 1 (max 7): halves, and the doubles just below them.
  keys.push_back({7.0f, 0.5f, -0.5f, 1.5f, -1.5f, 2.5f, -2.5f, 6.5f, -6.5f, -0.0f,
                  std::nextafter(0.5f, 0.0f), std::nextafter(-2.5f, 0.0f), -7.0f, 3.5f});
  // Scale 0.5 (max 3.5): the quarter steps are halves of codes.
  keys.push_back({3.5f, 0.25f, -0.25f, 0.75f, -1.25f, 3.25f, -3.25f, 1.75f});
  keys.push_back(std::vector<float>(16, 0.0f));
  keys.push_back({1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f});
  keys.push_back({-std::numeric_limits<float>::infinity(), 1.0f});
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const std::vector<float> &k = keys[i];
    const std::size_t d = k.size(), half = hybrid_quant_bytes(d);
    const ref::HybridLowRank::Key want = ref::HybridLowRank::round_key(k, 4);
    for (std::size_t token : {std::size_t(0), std::size_t(kQuantBlock + 3)}) {
      std::vector<std::uint8_t> packed(hybrid_quant_size(token + 1, d), 0xAB);
      const float s = hybrid_quant_pack(k.data(), d, token, packed.data());
      if (std::isnan(want.scale))
        EXPECT_TRUE(std::isnan(s)) << i;
      else
        EXPECT_EQ(s, want.scale) << i;
      const bool codes = want.scale > 0;
      const std::uint8_t *b =
          packed.data() + token / kQuantBlock * kQuantBlock * half + token % kQuantBlock;
      for (std::size_t j = 0; j < d; ++j) {
        const int nib = (b[j / 2 * kQuantBlock] >> (4 * (j % 2))) & 15;
        EXPECT_EQ(nib - 8, codes ? int(want.x[j]) : 0) << "key " << i << " component " << j;
      }
    }
  }
}

TEST(HybridRank, QuantScoresAreTheReferencesDoubles) {
  ref::Rng rng(8);
  const std::size_t n = 203;
  std::vector<float> acc(n), ks(n);
  std::vector<double> logv(n);
  for (std::size_t i = 0; i < n; ++i) {
    acc[i] = float(std::int64_t(rng.below(200000)) - 100000);
    ks[i] = float(rng.uniform());
    logv[i] = rng.gaussian();
  }
  ks[3] = std::numeric_limits<float>::quiet_NaN();
  ks[4] = 0.0f;
  const double sq = double(0.0123f), scale = 0.1; // s_q is a float's value
  for_each_target([&] {
    for (bool vnorm : {false, true})
      for (std::size_t len : {n, std::size_t{7}, std::size_t{0}}) {
        std::vector<double> z(len + 1, 12345.0);
        hybrid_quant_scores(acc.data(), ks.data(), vnorm ? logv.data() : nullptr, len, sq, scale,
                            z.data());
        for (std::size_t i = 0; i < len; ++i) {
          double want = scale * (sq * double(ks[i]) * double(acc[i])); // sc * dot8's order
          if (vnorm)
            want += logv[i];
          if (std::isnan(want))
            want = -std::numeric_limits<double>::infinity();
          ASSERT_EQ(z[i], want) << "token " << i << " vnorm " << vnorm;
        }
        EXPECT_EQ(z[len], 12345.0); // nothing written past n
      }
  });
}

} // namespace
} // namespace pig::runtime::lsh
