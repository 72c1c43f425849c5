// lsh-hybrid's runtime selection (pig/runtime/hybrid_select.h) against pig::ref::hybrid_estimate:
// the same head, the same drawn tail, inclusion probabilities equal to the last bits, on every
// compiled Highway target, for random scores, ties, unscored tokens, tiny and huge budgets, and
// the vector exp against std::exp.
#include "pig/runtime/hybrid_select.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../kernels/test_util.h" // pig::test::for_each_target
#include "pig/reference/hybrid.h"
#include "pig/reference/kv_quant.h"
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

// hybrid_attend on f32, bf16 and q8 rows against the softmax written out in double over the same
// numbers (bf16's widening, q8's dequantisation): the output to float rounding, the lse and the
// logits to 1e-12; head dims with a vector remainder; an empty set and a NaN logit.
TEST(HybridSelect, AttendIsTheWeightedSoftmax) {
  ref::Rng rng(17);
  for (std::size_t d : {std::size_t{64}, std::size_t{96}, std::size_t{40}}) {
    const std::size_t n = 50;
    std::vector<float> q(d), k(n * d), v(n * d);
    for (float &x : q)
      x = float(rng.gaussian());
    for (float &x : k)
      x = float(rng.gaussian());
    for (float &x : v)
      x = float(rng.gaussian());
    const std::vector<std::uint32_t> ids{3, 0, 49, 17, 17, 8, 25};
    const std::vector<double> bias{0.0, 0.0, -1.5, 2.0, 0.25, 0.0, -0.5};
    for (DType t : {DType::f32, DType::bf16, DType::q8}) {
      if (t == DType::q8 && d % 32 != 0)
        continue;
      // The rows as the cache holds them, and the floats they stand for.
      std::vector<std::uint8_t> kb, vb;
      std::vector<float> kf(n * d), vf(n * d);
      if (t == DType::f32) {
        kf = k;
        vf = v;
        kb.assign(reinterpret_cast<const std::uint8_t *>(k.data()),
                  reinterpret_cast<const std::uint8_t *>(k.data() + k.size()));
        vb.assign(reinterpret_cast<const std::uint8_t *>(v.data()),
                  reinterpret_cast<const std::uint8_t *>(v.data() + v.size()));
      } else if (t == DType::bf16) {
        std::vector<std::uint16_t> k16(n * d), v16(n * d);
        convert_to_bf16(k.data(), k16.data(), k16.size());
        convert_to_bf16(v.data(), v16.data(), v16.size());
        for (std::size_t i = 0; i < n * d; ++i) {
          kf[i] = std::bit_cast<float>(std::uint32_t(k16[i]) << 16);
          vf[i] = std::bit_cast<float>(std::uint32_t(v16[i]) << 16);
        }
        kb.assign(reinterpret_cast<const std::uint8_t *>(k16.data()),
                  reinterpret_cast<const std::uint8_t *>(k16.data() + k16.size()));
        vb.assign(reinterpret_cast<const std::uint8_t *>(v16.data()),
                  reinterpret_cast<const std::uint8_t *>(v16.data() + v16.size()));
      } else {
        const std::size_t rb = ref::q8_row_bytes(d);
        kb.resize(n * rb);
        vb.resize(n * rb);
        for (std::size_t i = 0; i < n; ++i) {
          ref::quantize_q8(&k[i * d], d, &kb[i * rb]);
          ref::quantize_q8(&v[i * d], d, &vb[i * rb]);
          ref::dequantize_q8(&kb[i * rb], d, &kf[i * d]);
          ref::dequantize_q8(&vb[i * rb], d, &vf[i * d]);
        }
      }
      const double scale = 1.0 / std::sqrt(double(d));
      std::vector<double> z(ids.size());
      double m = -kInf;
      for (std::size_t c = 0; c < ids.size(); ++c) {
        double dot = 0;
        for (std::size_t j = 0; j < d; ++j)
          dot += double(q[j]) * double(kf[ids[c] * d + j]);
        z[c] = scale * dot - bias[c];
        m = std::max(m, z[c]);
      }
      double sum = 0;
      for (double x : z)
        sum += std::exp(x - m);
      std::vector<double> want(d, 0.0);
      for (std::size_t c = 0; c < ids.size(); ++c)
        for (std::size_t j = 0; j < d; ++j)
          want[j] += std::exp(z[c] - m) / sum * double(vf[ids[c] * d + j]);
      for_each_target([&] {
        SCOPED_TRACE("d=" + std::to_string(d) + " " + to_string(t));
        std::vector<float> out(d);
        std::vector<double> logits(ids.size());
        const double lse = hybrid_attend(q.data(), kb.data(), vb.data(), t, d, scale, ids.data(),
                                         bias.data(), ids.size(), out.data(), logits.data());
        EXPECT_NEAR(lse, m + std::log(sum), 1e-12 * std::abs(m + std::log(sum)) + 1e-12);
        for (std::size_t c = 0; c < ids.size(); ++c)
          EXPECT_NEAR(logits[c], z[c], 1e-12 * (std::abs(z[c]) + 1));
        for (std::size_t j = 0; j < d; ++j)
          EXPECT_NEAR(out[j], want[j], 1e-6 * (std::abs(want[j]) + 1e-3)) << j;
        // Nothing attended: lse -inf, output 0.
        std::vector<float> none(d, 7.0f);
        EXPECT_EQ(hybrid_attend(q.data(), kb.data(), vb.data(), t, d, scale, ids.data(),
                                bias.data(), 0, none.data()),
                  -kInf);
        EXPECT_EQ(none[0], 0.0f);
        // A NaN bias (a NaN logit): NaN out, as the reference's softmax.
        std::vector<double> nan_bias = bias;
        nan_bias[2] = std::numeric_limits<double>::quiet_NaN();
        EXPECT_TRUE(std::isnan(hybrid_attend(q.data(), kb.data(), vb.data(), t, d, scale,
                                             ids.data(), nan_bias.data(), ids.size(), out.data())));
        EXPECT_TRUE(std::isnan(out[0]));
      });
    }
  }
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
  // Long enough for Rank's superblock bound (at least `head` superblocks), with ties at it.
  std::vector<double> long_ties = random(20000, 1.0, 0.0);
  for (double &x : long_ties)
    x = std::round(x * 2) / 2;
  cases.push_back({"ties n=20000", long_ties, base});
  cases.push_back({"all equal n=20000", std::vector<double>(20000, -0.5), base});
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

// The sampler's head, tail and pi against the reference's for case c (c.cfg.cut included);
// `rank` runs Rank or RankSubset on the sampler.
void ExpectReferenceSelection(const Case &c, std::size_t begin, HybridSampler &sampler,
                              const std::function<void(std::size_t head)> &rank) {
  const RefSelection want = Reference(c, begin);
  const std::size_t N = c.score.size();
  const double target = c.cfg.budget * double(N);
  const std::size_t head =
      std::min<std::size_t>(N, std::size_t(std::llround(c.cfg.head_share * target)));
  rank(head);
  sampler.Draw(std::max(0.0, target - double(head)), c.cfg.floor);
  ASSERT_EQ(sampler.head().size(), want.head.size());
  for (std::size_t j = 0; j < want.head.size(); ++j)
    ASSERT_EQ(sampler.head()[j] + begin, want.head[j]) << j;
  ASSERT_EQ(sampler.tail().size(), want.tail.size());
  ASSERT_EQ(sampler.pi().size(), want.pi.size());
  for (std::size_t j = 0; j < want.tail.size(); ++j) {
    ASSERT_EQ(sampler.tail()[j] + begin, want.tail[j]) << j;
    // The one difference: exp within 2 ulp, then the same sums in another order (vector
    // lanes): the partition function of N terms, and so each pi, agree to within N rounding
    // errors, N 2^-53 relative (1.2e-13 was seen at N = 20000 with ties), at least 1e-13.
    const double tol = std::max(1e-13, double(N) * 0x1p-53);
    EXPECT_NEAR(sampler.pi()[j], want.pi[j], tol * want.pi[j]) << j;
  }
}

TEST(HybridSelect, SelectsWhatTheReferenceSelects) {
  for_each_target([&] {
    HybridSampler sampler; // reused across the cases, as a pool thread's scratch is
    for (const Case &c : Cases()) {
      SCOPED_TRACE(c.name);
      const std::size_t begin = 4;
      ExpectReferenceSelection(c, begin, sampler, [&](std::size_t head) {
        std::vector<double> score = c.score; // Rank takes it
        sampler.Rank(score, head, c.cfg.seed, begin);
      });
      std::size_t scored = 0;
      for (double x : c.score)
        scored += x != -kInf;
      EXPECT_EQ(sampler.scored(), scored);
      EXPECT_EQ(sampler.cut_off(), 0u);
    }
  });
}

// With a cut (ref::HybridConfig::cut): Rank over every token, and RankSubset over a listing that
// holds the head, every tail token within the cut of the tail's best, and some tokens below it
// (scored and not) that the sampler must cut itself, select what the reference selects.
TEST(HybridSelect, ACutAndASubsetSelectWhatTheReferenceSelects) {
  for_each_target([&] {
    HybridSampler sampler;
    ref::Rng rng(17);
    for (Case c : Cases()) {
      for (double cut : {0.5, 3.0}) {
        c.cfg.cut = cut;
        SCOPED_TRACE(c.name + " cut=" + std::to_string(cut));
        const std::size_t begin = 4, N = c.score.size();
        ExpectReferenceSelection(c, begin, sampler, [&](std::size_t head) {
          std::vector<double> score = c.score;
          sampler.Rank(score, head, c.cfg.seed, begin, cut);
        });
        // The reference's head and the tail's best, for the listing.
        const RefSelection want = Reference(c, begin);
        std::vector<bool> in_head(N, false);
        for (std::size_t i : want.head)
          in_head[i - begin] = true;
        double best = -kInf;
        for (std::size_t i = 0; i < N; ++i)
          if (!in_head[i])
            best = std::max(best, c.score[i]);
        std::vector<std::uint32_t> pos;
        std::vector<double> listed;
        std::size_t listed_scored = 0;
        for (std::size_t i = 0; i < N; ++i)
          if (in_head[i] || (c.score[i] > -kInf && c.score[i] >= best - cut) ||
              rng.uniform() < 0.05) {
            pos.push_back(std::uint32_t(i));
            listed.push_back(c.score[i]);
            listed_scored += c.score[i] > -kInf;
          }
        const std::size_t head = std::min<std::size_t>(
            N, std::size_t(std::llround(c.cfg.head_share * c.cfg.budget * double(N))));
        if (head < N && listed_scored <= head)
          continue; // RankSubset's precondition (the head within the listed scored tokens)
        ExpectReferenceSelection(c, begin, sampler, [&](std::size_t h) {
          std::vector<double> score = listed;
          sampler.RankSubset(score, pos, N, h, c.cfg.seed, begin, cut);
        });
      }
    }
  });
  // RankSubset refuses what it cannot serve.
  HybridSampler s;
  std::vector<double> score = {1.0, 2.0};
  const std::vector<std::uint32_t> down = {3, 1};
  EXPECT_THROW(s.RankSubset(score, down, 10, 1, 1, 0, 1.0), std::invalid_argument);
  score = {1.0, 2.0};
  const std::vector<std::uint32_t> up = {1, 3};
  EXPECT_THROW(s.RankSubset(score, up, 10, 2, 1, 0, 1.0), std::invalid_argument); // head 2 > 1
  score = {1.0, 2.0};
  EXPECT_THROW(s.RankSubset(score, up, 3, 1, 1, 0, 1.0), std::invalid_argument); // 3 >= n
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
