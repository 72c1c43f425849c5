// SimHash encoding, the sampling rule, centering and the collision probability.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "pig/reference/lsh.h"
#include "pig/reference/random.h"
#include "test_util.h"

namespace pig::ref {
namespace {

using testing::gaussian_matrix;
using testing::gaussian_vector;

std::string message_of(const LshConfig &cfg) {
  try {
    cfg.validate();
  } catch (const std::invalid_argument &e) {
    return e.what();
  }
  return "no exception";
}

TEST(LshConfig, InvalidParametersThrowClearMessages) {
  EXPECT_EQ(message_of({0, 10, 1, 0}), "LSH K must be in [1, 16], got 0");
  EXPECT_EQ(message_of({17, 10, 1, 0}), "LSH K must be in [1, 16], got 17");
  EXPECT_EQ(message_of({4, 0, 1, 0}), "LSH L must be in [1, 1024], got 0");
  EXPECT_EQ(message_of({4, 1025, 1, 0}), "LSH L must be in [1, 1024], got 1025");
  EXPECT_EQ(message_of({4, 10, 0, 0}), "LSH t must be in [1, 10], got 0");
  EXPECT_EQ(message_of({4, 10, 11, 0}), "LSH t must be in [1, 10], got 11");
  EXPECT_EQ(message_of({16, 1024, 1024, 0}), "no exception");
  EXPECT_EQ(message_of({1, 1, 1, 0}), "no exception");
  EXPECT_THROW(collision_probability(0.5, 0, 10, 2), std::invalid_argument);
  EXPECT_THROW(collision_probability(0.5, 4, 10, 11), std::invalid_argument);
  EXPECT_THROW(simhash_matrix(1, 8, 4, 0), std::invalid_argument);
}

TEST(Encode, BitsFollowTheDefinition) {
  Rng rng(11);
  const std::size_t d = 24;
  const LshConfig cfg{5, 7, 2, 3};
  const OwnedMatrix W = simhash_matrix(cfg.seed, d, cfg.K, cfg.L);
  for (int trial = 0; trial < 20; ++trial) {
    const auto x = gaussian_vector(rng, d);
    const auto codes = encode(x, W, cfg);
    ASSERT_EQ(codes.size(), std::size_t(cfg.L));
    for (int l = 0; l < cfg.L; ++l)
      for (int j = 0; j < cfg.K; ++j) {
        double dot = 0;
        for (std::size_t r = 0; r < d; ++r)
          dot += double(x[r]) * W.at(r, std::size_t(l * cfg.K + j));
        EXPECT_EQ((codes[std::size_t(l)] >> j) & 1u, dot > 0 ? 1u : 0u);
      }
    EXPECT_EQ(codes[0] >> cfg.K, 0); // no stray high bits
  }
  // A zero vector has every projection 0, and 0 > 0 is false: all codes 0.
  EXPECT_EQ(encode(std::vector<float>(d, 0.0f), W, cfg), std::vector<std::uint16_t>(7, 0));
  // Shape errors.
  EXPECT_THROW(encode(std::vector<float>(d + 1, 1.0f), W, cfg), std::invalid_argument);
  EXPECT_THROW(encode(std::vector<float>(d, 1.0f), W, LshConfig{5, 8, 2, 3}),
               std::invalid_argument);
}

TEST(Encode, SmallerConfigurationsUseALeadingColumnPrefix) {
  Rng rng(12);
  const std::size_t d = 16;
  const OwnedMatrix big = simhash_matrix(9, d, 10, 15);
  const OwnedMatrix small = simhash_matrix(9, d, 3, 20);
  for (std::size_t r = 0; r < d; ++r)
    for (std::size_t c = 0; c < small.cols; ++c)
      ASSERT_EQ(small.at(r, c), big.at(r, c));
  const LshConfig cfg{3, 20, 2, 9};
  const OwnedMatrix X = gaussian_matrix(rng, 10, d);
  EXPECT_EQ(encode_rows(X, big, cfg), encode_rows(X, small, cfg));
  for (std::size_t i = 0; i < X.rows; ++i) {
    const auto row = encode(X.row_span(i), small, cfg);
    const auto all = encode_rows(X, small, cfg);
    EXPECT_TRUE(std::equal(row.begin(), row.end(), all.begin() + std::ptrdiff_t(i * 20)));
  }
}

TEST(SampleSet, ThresholdOnCollisionCount) {
  const LshConfig cfg{4, 3, 2, 0};
  const std::vector<std::uint16_t> q = {1, 2, 3};
  const std::vector<std::uint16_t> keys = {
      1, 2, 3, // token 0: 3 hits
      1, 0, 3, // token 1: 2 hits
      0, 2, 0, // token 2: 1 hit
      0, 0, 0, // token 3: 0 hits
      9, 2, 3, // token 4: 2 hits
  };
  EXPECT_EQ(sample_set(q, keys, cfg, 0, 5), (std::vector<std::size_t>{0, 1, 4}));
  EXPECT_EQ(sample_set(q, keys, cfg, 1, 4), (std::vector<std::size_t>{1}));
  EXPECT_EQ(sample_set(q, keys, LshConfig{4, 3, 1, 0}, 0, 5),
            (std::vector<std::size_t>{0, 1, 2, 4}));
  EXPECT_EQ(sample_set(q, keys, LshConfig{4, 3, 3, 0}, 0, 5), (std::vector<std::size_t>{0}));
  EXPECT_THROW(sample_set(q, keys, cfg, 0, 6), std::invalid_argument);
  EXPECT_EQ(count_collisions(q, std::vector<std::uint16_t>{1, 0, 3}), 2);
}

TEST(Centering, SubtractsTheMeanOfTheGivenRows) {
  OwnedMatrix K(4, 2);
  K.data = {1, 2, 3, 4, 5, 6, 100, 100};
  const Centered c = center(K, 0, 3);
  EXPECT_EQ(c.mean, (std::vector<float>{3, 4}));
  EXPECT_EQ(c.keys.data, (std::vector<float>{-2, -2, 0, 0, 2, 2, 97, 96}));
  EXPECT_EQ(center(K).mean, (std::vector<float>{27.25f, 28.0f}));
  EXPECT_THROW(center(K, 2, 2), std::invalid_argument);
  EXPECT_THROW(center(K, 0, 5), std::invalid_argument);
}

TEST(Cosine, ZeroNormIsZeroAndRoundingIsClamped) {
  const std::vector<float> a = {1, 2, 3}, zero = {0, 0, 0};
  EXPECT_EQ(cosine(a, zero), 0.0);
  EXPECT_EQ(cosine(zero, zero), 0.0);
  EXPECT_NEAR(cosine(a, a), 1.0, 1e-15);
  // A cosine rounded past +-1 (here forced) must not reach acos unclamped.
  for (double c : {1.0 + 1e-12, std::nextafter(1.0, 2.0), -1.0 - 1e-12, 7.0, -7.0}) {
    const double u = collision_probability(c, 10, 150, 2);
    EXPECT_FALSE(std::isnan(u)) << c;
    EXPECT_EQ(u, c > 0 ? 1.0 : 0.0) << c;
    EXPECT_FALSE(std::isnan(table_collision_probability(c, 10)));
  }
  // Huge norms: the cosine is still in range (no overflow in the norms).
  const std::vector<float> big = {3e38f, -3e38f, 3e38f};
  EXPECT_NEAR(cosine(big, big), 1.0, 1e-15);
}

// Independent closed forms in long double, where they do not cancel.
TEST(CollisionProbability, MatchesClosedForms) {
  for (int K : {1, 4, 10}) {
    for (int L : {1, 2, 10, 150}) {
      for (double c = -0.95; c < 1.0; c += 0.1) {
        const long double p =
            1.0L - std::acos(static_cast<long double>(c)) / std::numbers::pi_v<long double>;
        const long double P = std::pow(p, K);
        const long double u1 = 1.0L - std::pow(1.0L - P, L);
        EXPECT_NEAR(collision_probability(c, K, L, 1), double(u1), 1e-12 + 1e-9 * double(u1))
            << "K=" << K << " L=" << L << " c=" << c;
        if (L >= 2) {
          const long double u2 = u1 - L * P * std::pow(1.0L - P, L - 1);
          // The long double formula itself cancels for tiny u2; compare only where it has
          // at least 8 digits left.
          if (u2 > 1e-10L) {
            EXPECT_NEAR(collision_probability(c, K, L, 2), double(u2), 1e-9 * double(u2) + 1e-15)
                << "K=" << K << " L=" << L << " c=" << c;
          }
        }
        EXPECT_NEAR(collision_probability(c, K, L, L), double(std::pow(P, L)),
                    1e-9 * double(std::pow(P, L)));
      }
    }
  }
}

// Where 1 - (1-P)^L - L P (1-P)^(L-1) cancels to nothing in double, the tail sum keeps full
// relative precision: u = C(L,2) P^2 (1 + O(L P)).
TEST(CollisionProbability, AccurateWhenTiny) {
  const int K = 16, L = 150;
  const double c = -0.9;
  const double p = 1.0 - std::acos(c) / std::numbers::pi;
  const double P = std::pow(p, K);
  const double approx = 0.5 * L * (L - 1) * P * P;
  const double u = collision_probability(c, K, L, 2);
  EXPECT_GT(u, 0.0);
  EXPECT_NEAR(u / approx, 1.0, 1e-9); // L P ~ 5e-12
  const double naive = 1.0 - std::pow(1.0 - P, L) - L * P * std::pow(1.0 - P, L - 1);
  EXPECT_GT(std::abs(naive - u), u); // the textbook form is useless here
  // log u stays finite where u underflows: u = P^1024 for t = L = 1024.
  const double lu = log_collision_probability(c, K, 1024, 1024);
  EXPECT_TRUE(std::isfinite(lu));
  EXPECT_NEAR(lu, 1024.0 * K * std::log(p), 1e-9 * std::abs(lu));
  EXPECT_EQ(collision_probability(c, K, 1024, 1024), 0.0);
  // The most extreme representable case: the cosine next to -1 gives p ~ 7e-9, P ~ 2e-131 and
  // u ~ C(L,2) P^2 ~ 3e-258, still with full relative precision in log u.
  const double tiny_cos = -1.0 + 2e-16;
  const double tp = 1.0 - std::acos(tiny_cos) / std::numbers::pi;
  EXPECT_NEAR(log_collision_probability(tiny_cos, K, L, 2),
              std::log(0.5 * L * (L - 1)) + 2.0 * K * std::log(tp), 1e-6);
  EXPECT_EQ(log_collision_probability(-1.0, K, L, 2), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(log_collision_probability(1.0, K, L, 2), 0.0);
  EXPECT_TRUE(std::isnan(collision_probability(std::nan(""), K, L, 2))); // NaN in, NaN out
}

// Multi-probe (ALGORITHM.md section 5): one table collides when the codes differ in at most r
// of K bits, q_r = sum_{i <= r} C(K, i) p^(K-i) (1-p)^i, and u is the binomial tail in q_r.
TEST(CollisionProbability, MultiProbeMatchesClosedForms) {
  for (int K : {2, 4, 10, 16}) {
    for (int r = 0; r <= std::min(3, K - 1); ++r) {
      for (double c = -0.95; c < 1.0; c += 0.1) {
        const long double p =
            1.0L - std::acos(static_cast<long double>(c)) / std::numbers::pi_v<long double>;
        long double q = 0, binom = 1;
        for (int i = 0; i <= r; ++i) {
          q += binom * std::pow(p, K - i) * std::pow(1.0L - p, i);
          binom = binom * (K - i) / (i + 1);
        }
        EXPECT_NEAR(table_collision_probability(c, K, r), double(q), 1e-12 * double(q) + 1e-300)
            << "K=" << K << " r=" << r << " c=" << c;
        for (int L : {1, 20, 150}) {
          const long double u1 = 1.0L - std::pow(1.0L - q, L);
          EXPECT_NEAR(collision_probability(c, K, L, 1, r), double(u1), 1e-9 * double(u1) + 1e-15)
              << "K=" << K << " L=" << L << " r=" << r << " c=" << c;
          if (L >= 2) {
            const long double u2 = u1 - L * q * std::pow(1.0L - q, L - 1);
            // The long double form cancels for small u2 (~19 digits minus -log10 u2): compare
            // where it keeps at least 12.
            if (u2 > 1e-7L) {
              EXPECT_NEAR(collision_probability(c, K, L, 2, r), double(u2), 1e-9 * double(u2))
                  << "K=" << K << " L=" << L << " r=" << r << " c=" << c;
            }
          }
        }
      }
      // A larger radius probes a superset of buckets: never a smaller probability.
      for (double c = -0.99; r > 0 && c < 1.0; c += 0.07) {
        EXPECT_GE(collision_probability(c, K, 30, 2, r),
                  collision_probability(c, K, 30, 2, r - 1) * (1 - 1e-12));
      }
    }
  }
  // Near cos = -1 the ball's outermost shell dominates: log u ~ log C(L,2) + 2 log(C(K,r)
  // p^(K-r)), finite with full relative precision where u underflows.
  const double tiny_cos = -1.0 + 2e-16, tp = 1.0 - std::acos(tiny_cos) / std::numbers::pi;
  EXPECT_NEAR(log_collision_probability(tiny_cos, 10, 150, 2, 1),
              std::log(0.5 * 150 * 149) + 2.0 * (std::log(10.0) + 9 * std::log(tp)), 1e-6);
  EXPECT_EQ(log_collision_probability(-1.0, 10, 150, 2, 1),
            -std::numeric_limits<double>::infinity());
  EXPECT_EQ(log_collision_probability(1.0, 10, 150, 2, 2), 0.0);
  EXPECT_TRUE(std::isnan(collision_probability(std::nan(""), 10, 75, 2, 1)));
  EXPECT_THROW(collision_probability(0.5, 4, 10, 2, 4), std::invalid_argument);  // r >= K
  EXPECT_THROW(collision_probability(0.5, 10, 10, 2, 4), std::invalid_argument); // r > kMaxR
  EXPECT_THROW(table_collision_probability(0.5, 10, -1), std::invalid_argument);
}

TEST(SampleSet, ProbeRadiusCountsTablesWithinRBits) {
  // Query codes {0b0000, 0b1111}; token codes at distances (0, 4), (1, 1), (2, 0), (3, 3).
  const std::vector<std::uint16_t> q{0x0, 0xF};
  const std::vector<std::uint16_t> keys{0x0, 0x0, 0x1, 0xE, 0x3, 0xF, 0x7, 0x8};
  EXPECT_EQ(count_collisions(q, std::span(keys).subspan(2, 2), 0), 0);
  EXPECT_EQ(count_collisions(q, std::span(keys).subspan(2, 2), 1), 2);
  LshConfig cfg{4, 2, 2, 0, 1};
  EXPECT_EQ(sample_set(q, keys, cfg, 0, 4), (std::vector<std::size_t>{1}));
  cfg.r = 2;
  EXPECT_EQ(sample_set(q, keys, cfg, 0, 4), (std::vector<std::size_t>{1, 2}));
  cfg.t = 1;
  EXPECT_EQ(sample_set(q, keys, cfg, 0, 4), (std::vector<std::size_t>{0, 1, 2}));
  cfg.r = 3;
  EXPECT_EQ(sample_set(q, keys, cfg, 0, 4), (std::vector<std::size_t>{0, 1, 2, 3}));
}

TEST(CollisionProbability, MonotoneInCosineAndThreshold) {
  double prev = -1.0;
  for (int i = -100; i <= 100; ++i) {
    const double u = collision_probability(i / 100.0, 8, 75, 2);
    EXPECT_GE(u, prev - 1e-15); // near u = 1, the log-space sum wobbles by an ulp
    EXPECT_LE(u, 1.0);
    prev = u;
    EXPECT_LE(u, collision_probability(i / 100.0, 8, 75, 1));
  }
}

// Empirical check of the whole chain (W, encode, sample rule) against the formula. For a pair of
// unit vectors at angle theta, the fraction of independent W draws (N = 300) in which they
// collide in >= t of L tables is Binomial(N, u)/N; it must lie within z = 5 standard errors
// (sqrt(u(1-u)/N)) of u, plus 1/N for the discreteness at u ~ 0 or 1. 108 comparisons (probe
// radius 0 and 1) at z = 5: false-alarm probability < 1e-4 in total, and the seeds are fixed.
TEST(CollisionProbability, EmpiricalFrequencyMatchesFormula) {
  const std::size_t d = 16, draws = 300;
  const int steps = 8;
  struct KL {
    int K, L;
  };
  std::uint64_t seed = 1;
  for (KL kl : {KL{2, 4}, KL{3, 8}, KL{4, 6}}) {
    for (int s = 0; s <= steps; ++s) {
      const double theta = std::numbers::pi * s / steps;
      std::vector<float> x(d, 0.0f), y(d, 0.0f);
      x[0] = 1.0f;
      y[0] = float(std::cos(theta));
      y[1] = float(std::sin(theta));
      const double c = cosine(x, y); // the angle of the float vectors actually hashed
      // hits[r][t - 1]: draws in which the pair collides in >= t tables at probe radius r.
      int hits[2][2] = {};
      for (std::size_t trial = 0; trial < draws; ++trial) {
        const LshConfig cfg{kl.K, kl.L, 1, seed++};
        const OwnedMatrix W = simhash_matrix(cfg.seed, d, cfg.K, cfg.L);
        const auto a = encode(x, W, cfg), b = encode(y, W, cfg);
        for (int r : {0, 1}) {
          const int n = count_collisions(a, b, r);
          hits[r][0] += n >= 1;
          hits[r][1] += n >= 2;
        }
      }
      for (int r : {0, 1})
        for (int t : {1, 2}) {
          const double u = collision_probability(c, kl.K, kl.L, t, r);
          const double f = double(hits[r][t - 1]) / draws;
          const double bound = 5.0 * std::sqrt(u * (1.0 - u) / draws) + 1.0 / draws;
          EXPECT_NEAR(f, u, bound)
              << "K=" << kl.K << " L=" << kl.L << " t=" << t << " r=" << r << " theta=" << theta;
        }
    }
  }
}

} // namespace
} // namespace pig::ref
