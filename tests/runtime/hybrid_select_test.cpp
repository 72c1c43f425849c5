// lsh-hybrid's runtime selection (pig/runtime/hybrid_select.h) against pig::ref::hybrid_estimate:
// the same head, the same drawn tail, inclusion probabilities equal to the last bits, on every
// compiled Highway target, for random scores, ties, unscored tokens, tiny and huge budgets, and
// the vector exp against std::exp.
#include "pig/runtime/hybrid_select.h"

#include <algorithm>
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

constexpr double kInf = std::numeric_limits<double>::infinity();

// Once per compiled Highway target this CPU supports (tests/kernels/test_util.h).
void for_each_target(const std::function<void()> &fn) {
  pig::test::for_each_target([&](const char *) { fn(); });
}

// Highway's Exp claims 1 ulp on [-DBL_MAX, 706]; std::exp is within 1 ulp of e^x too, so the two
// differ by at most 2 ulp (4.5e-16 relative) where the result is normal. Below e^-708 the result
// is subnormal (or 0), where an absolute 1e-300 bounds both.
TEST(HybridSelect, VectorExpMatchesStdExp) {
  ref::Rng rng(7);
  std::vector<double> s;
  for (int i = 0; i < 997; ++i)
    s.push_back(-745.0 * rng.uniform());
  for (double x :
       {0.0, -0.0, -1e-300, -1e-10, -1.0, -700.0, -708.5, -745.2, -746.0, -1000.0, -1e300, -kInf})
    s.push_back(x);
  for_each_target([&] {
    for (double m : {0.0, 3.5, -2.0}) {
      std::vector<double> shifted(s.size()), e(s.size());
      for (size_t i = 0; i < s.size(); ++i)
        shifted[i] = s[i] + m; // shifted[i] - m is s[i] or its neighbour
      const double sum = hybrid_exp_shifted(shifted.data(), s.size(), m, e.data());
      double want_sum = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        const double want = std::exp(shifted[i] - m);
        want_sum += want;
        if (want > 1e-300)
          EXPECT_NEAR(e[i], want, 4.5e-16 * want) << "x=" << shifted[i] - m;
        else
          EXPECT_NEAR(e[i], want, 1e-300) << "x=" << shifted[i] - m;
      }
      EXPECT_NEAR(sum, want_sum, 1e-13 * want_sum);
    }
  });
}

// The uniforms are integer hashing: bit-identical to the reference's on every target, for starts
// where the token counter's low word wraps and lengths that leave a vector remainder.
TEST(HybridSelect, UniformsAreTheReferencesBitForBit) {
  for_each_target([&] {
    for (std::uint64_t seed : {std::uint64_t{0}, std::uint64_t{0x5eed}, ~std::uint64_t{0}})
      for (std::size_t begin : {std::size_t{0}, std::size_t{4}, (std::size_t{1} << 32) - 5})
        for (std::size_t n : {0, 1, 7, 8, 9, 100}) {
          std::vector<double> u(n + 1, -1.0);
          hybrid_uniforms(seed, begin, n, u.data());
          for (std::size_t i = 0; i < n; ++i)
            ASSERT_EQ(u[i], ref::hybrid_uniform(seed, begin + i))
                << "seed=" << seed << " begin=" << begin << " i=" << i;
          EXPECT_EQ(u[n], -1.0); // nothing written past n
        }
  });
}

struct Case {
  std::string name;
  std::vector<double> score;
  ref::HybridConfig cfg;
};

// What ref::hybrid_estimate selects (epsilon = 0; its attend only records the ids and biases).
struct RefSelection {
  std::vector<std::size_t> head, tail;
  std::vector<double> pi;
};
RefSelection Reference(const Case &c, std::size_t begin) {
  ref::HybridTokens t;
  t.indexed_begin = begin;
  t.attend = [](std::span<const std::size_t>, std::span<const double>) { return ref::Attention{}; };
  const ref::HybridResult r = ref::hybrid_estimate(c.score, t, c.cfg);
  return {r.head, r.tail, r.pi};
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  ref::Rng rng(2026);
  auto random = [&](std::size_t n, double spread, double unscored) {
    std::vector<double> s(n);
    for (double &x : s)
      x = rng.uniform() < unscored ? -kInf : spread * rng.gaussian();
    return s;
  };
  ref::HybridConfig base;
  base.seed = 0xabc;
  cases.push_back({"empty", {}, base});
  cases.push_back({"one token", {0.5}, base});
  cases.push_back({"five tokens", random(5, 1.0, 0.0), base});
  for (std::size_t n : {100, 3001, 20000})
    cases.push_back({"random n=" + std::to_string(n), random(n, 2.0, 0.0), base});
  ref::HybridConfig big = base;
  big.budget = 0.3;
  cases.push_back({"budget 0.3", random(3001, 2.0, 0.0), big});
  // Peaked scores: the water-filling caps many tokens at pi = 1.
  cases.push_back({"peaked", random(3001, 12.0, 0.0), big});
  // Ties: scores on a coarse grid (the Hamming ranker's cos table at equal norms gives these).
  std::vector<double> ties = random(2000, 1.0, 0.0);
  for (double &x : ties)
    x = std::round(x * 2) / 2;
  cases.push_back({"ties", ties, big});
  cases.push_back({"all equal", std::vector<double>(777, 1.25), big});
  // Unscored tokens (cand=t): a share, all of them, and with every scored token in the head.
  cases.push_back({"half unscored", random(5000, 2.0, 0.5), base});
  cases.push_back({"all unscored", random(4000, 2.0, 1.0), big});
  cases.push_back({"few scored", random(4000, 2.0, 0.998), big});
  ref::HybridConfig all_head = base;
  all_head.head_share = 1.0;
  cases.push_back({"head only", random(3001, 2.0, 0.0), all_head});
  ref::HybridConfig no_head = base;
  no_head.head_share = 0.0;
  no_head.floor = 1.0; // uniform sampling
  cases.push_back({"uniform tail", random(3001, 2.0, 0.3), no_head});
  ref::HybridConfig everything = base;
  everything.budget = 1.0;
  cases.push_back({"budget 1", random(300, 2.0, 0.2), everything});
  // Huge scores (huge norms): exp underflows for all but the top; +inf scores are the reference's
  // NaN case and are left out here (the runtime's ranker gives them only with infinite keys).
  cases.push_back({"huge", random(3001, 1e6, 0.0), big});
  return cases;
}

TEST(HybridSelect, SelectsWhatTheReferenceSelects) {
  for_each_target([&] {
    HybridSampler sampler; // reused across the cases, as a pool thread's scratch is
    for (const Case &c : Cases()) {
      SCOPED_TRACE(c.name);
      const std::size_t begin = 4;
      const RefSelection want = Reference(c, begin);
      const std::size_t N = c.score.size();
      const double target = c.cfg.budget * double(N);
      const std::size_t head =
          std::min<std::size_t>(N, std::size_t(std::llround(c.cfg.head_share * target)));
      std::vector<double> score = c.score; // Rank takes it
      sampler.Rank(score, head, c.cfg.seed, begin);
      sampler.Draw(std::max(0.0, target - double(head)), c.cfg.floor);
      ASSERT_EQ(sampler.head().size(), want.head.size());
      for (std::size_t j = 0; j < want.head.size(); ++j)
        ASSERT_EQ(sampler.head()[j] + begin, want.head[j]) << j;
      ASSERT_EQ(sampler.tail().size(), want.tail.size());
      ASSERT_EQ(sampler.pi().size(), want.pi.size());
      for (std::size_t j = 0; j < want.tail.size(); ++j) {
        ASSERT_EQ(sampler.tail()[j] + begin, want.tail[j]) << j;
        // The one difference: exp within 2 ulp, then the same sums: pi to ~1e-15 relative.
        EXPECT_NEAR(sampler.pi()[j], want.pi[j], 1e-13 * want.pi[j]) << j;
      }
      std::size_t scored = 0;
      for (double x : c.score)
        scored += x != -kInf;
      EXPECT_EQ(sampler.scored(), scored);
    }
  });
}

// The sampler draws a superset when the budget grows (the uniforms are fixed per token) and its
// expected size is the budget: over the tokens, sum pi = T, so the count is T +- a few sd.
TEST(HybridSelect, DrawIsNestedAndSizedByTheBudget) {
  ref::Rng rng(99);
  std::vector<double> score(20000);
  for (double &x : score)
    x = 2.0 * rng.gaussian();
  HybridSampler s;
  s.Rank(score, 100, 42, 0);
  std::vector<std::uint32_t> last;
  for (double T : {50.0, 200.0, 800.0, 3200.0}) {
    s.Draw(T, 0.1);
    const std::vector<std::uint32_t> now(s.tail().begin(), s.tail().end());
    EXPECT_TRUE(std::includes(now.begin(), now.end(), last.begin(), last.end())) << T;
    double sum_pi_drawn = 0;
    for (double p : s.pi())
      sum_pi_drawn += 1.0 / p;
    // Poisson sampling: the count has variance sum pi (1 - pi) <= T, so 5 sd is 5 sqrt(T).
    EXPECT_NEAR(double(now.size()), T, 5 * std::sqrt(T)) << T;
    // The Horvitz-Thompson estimate of the tail's size (19900 tokens) is unbiased with variance
    // sum (1 - pi) / pi. The floor gives every token pi >= T floor / N roughly, so the sd is at
    // most about N / sqrt(T floor): 22 % of N at T = 800, 11 % at 3200. +-50 % is > 4.5 sd there.
    if (T >= 800) {
      EXPECT_GT(sum_pi_drawn, 19900 * 0.5) << T;
      EXPECT_LT(sum_pi_drawn, 19900 * 1.5) << T;
    }
    last = now;
  }
}

} // namespace
} // namespace pig::runtime::lsh
