// The attend kernels (sampled pass through the whole step, dense pass, merge) against pig::ref,
// for every set on every target.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "lsh_test_util.h"
#include "pig/reference/attention.h"
#include "pig/reference/random.h"
#include "pig/reference/transform.h"

namespace pig::test {
namespace {

using lsh::DType;
using lsh::KernelRegistry;
using lsh::LshKernelSet;

TEST(SampledAttention, MatchesReferenceOnSyntheticProblems) {
  for (const Config &c : kConfigs)
    for (int G : {1, 3}) {
      const Problem pr = make_problem(kN, std::size_t(c.d), G, 11);
      check_magicpig(pr, c, G, 2, {}, 2e-4);
    }
}

// Multi-probe (ALGORITHM.md section 5): the walk of every probed bucket on the specialised and
// scheduled sets, and u from q_r in the log u table, against pig::ref; with fitted hashing too,
// and on an index too small to have every bucket filled.
TEST(SampledAttention, MultiProbeMatchesReference) {
  for (const Config &c : kConfigs)
    check_magicpig(make_problem(kN, std::size_t(c.d), 3, 23), c, 3, {2, 1}, {}, 2e-4);
  check_magicpig(make_problem(kN / 2, 64, 1, 29), {8, 75, 64}, 1, {1, 2}, {}, 2e-4);
  check_magicpig(make_problem(kN / 2, 64, 3, 31), {8, 75, 64}, 3, {3, 3}, {}, 2e-4);
  check_magicpig(make_problem(kN / 2, 64, 3, 37), {10, 150, 64}, 3, {2, 1}, {}, 2e-4,
                 ref::TransformSpec::parse("whiten:a=0.25"));
  for (std::size_t n : {69, 70, 80})
    check_magicpig(make_problem(n, 64, 2, 3 + n), {10, 150, 64}, 2, {2, 2}, {}, 2e-4);
}

// Hashing in a space fitted to the keys (whitening, the transform the runtime serves): the fit,
// the mapped keys and queries, the stored norms and the kernels' u against pig::ref.
TEST(SampledAttention, FittedHashingMatchesReference) {
  for (const Config &c : kConfigs) // a group of 3 (one head: the adversarial cases below)
    check_magicpig(make_problem(kN, std::size_t(c.d), 3, 17), c, 3, 2, {}, 2e-4,
                   ref::TransformSpec::parse("whiten:a=0.25"));
  for (const char *spec : {"whiten:a=0.5", "whiten:a=1"}) // stronger maps, one configuration
    check_magicpig(make_problem(kN / 2, 64, 3, 19), {8, 75, 64}, 3, 2, {}, 2e-4,
                   ref::TransformSpec::parse(spec));
  // 6 heads in two chunks (the query norms of the second chunk are offset), and a tiny index.
  check_magicpig(make_problem(kN / 2, 64, 6, 18), {8, 75, 64}, 6, 2, {}, 2e-4,
                 ref::TransformSpec::parse("whiten:a=0.25"));
  for (std::size_t n : {69, 70, 80})
    check_magicpig(make_problem(n, 64, 3, 3 + n), {10, 150, 64}, 3, 2, {}, 2e-4,
                   ref::TransformSpec::parse("whiten:a=0.25"));
}

TEST(SampledAttention, FittedHashingAdversarialInputs) {
  const Config c{8, 75, 64};
  const ref::TransformSpec whiten = ref::TransformSpec::parse("whiten:a=0.5");
  {
    // All keys equal: nothing to fit (the identity), every norm 0, every token sampled.
    Problem pr = make_problem(500, 64, 2, 31);
    for (std::size_t i = 1; i < pr.n; ++i)
      for (std::size_t j = 0; j < pr.d; ++j) {
        pr.K.f32.at(i, j) = pr.K.f32.at(0, j);
        pr.K.bf16[i * pr.d + j] = pr.K.bf16[j];
      }
    check_magicpig(pr, c, 2, 2, {}, 2e-4, whiten);
  }
  {
    // Keys of rank 2 (a degenerate covariance: 62 eigenvalues floored) with huge norms.
    Problem pr = make_problem(500, 64, 1, 32);
    ref::Rng rng(33);
    for (std::size_t i = 0; i < pr.n; ++i) {
      const double a = 1e3 * rng.gaussian(), b = 1e3 * rng.gaussian();
      for (std::size_t j = 0; j < pr.d; ++j)
        pr.K.f32.at(i, j) = float(j % 2 ? a : b);
    }
    pr.K = Rows(std::move(pr.K.f32)); // bf16-exact again
    check_magicpig(pr, c, 1, 2, {}, 2e-4, whiten);
  }
  {
    // Keys of rank 1, not zero (63 eigenvalues floored), and every a = 0.25..1: a finite answer,
    // the reference's (a NaN on either side fails).
    Problem pr = make_problem(500, 64, 1, 35);
    ref::Rng rng(36);
    for (std::size_t i = 0; i < pr.n; ++i) {
      const double a = 10.0 * rng.gaussian();
      for (std::size_t j = 0; j < pr.d; ++j)
        pr.K.f32.at(i, j) = float(a * (0.5 + 0.01 * double(j)));
    }
    pr.K = Rows(std::move(pr.K.f32));
    for (const char *spec : {"whiten:a=0.25", "whiten:a=0.5", "whiten:a=1"})
      check_magicpig(pr, c, 1, 2, {}, 2e-4, ref::TransformSpec::parse(spec));
  }
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    // Every key NaN, or every key infinite: nothing to fit (the identity, as in the reference);
    // the logits are NaN or inf - inf, so the answer is NaN on both sides, never a crash.
    Problem pr = make_problem(300, 64, 2, 37);
    std::fill(pr.K.f32.data.begin(), pr.K.f32.data.end(), bad);
    pr.K = Rows(std::move(pr.K.f32));
    check_magicpig(pr, c, 2, 2, {}, 2e-4, whiten, Nan::expected);
  }
  {
    // NaN in an indexed key: left out of the fit, hashed to code 0 and not sampled for this
    // query, so the answer is a number (the reference's), not NaN.
    Problem pr = make_problem(500, 64, 1, 34);
    pr.K.f32.at(200, 5) = std::numeric_limits<float>::quiet_NaN();
    pr.K.bf16[200 * pr.d + 5] = 0x7FC0;
    check_magicpig(pr, c, 1, 2, {}, 2e-4, whiten);
  }
}

TEST(SampledAttention, GroupsLargerThanOneChunk) {
  // 6 heads run as chunks of 4 and 2 over one union of sample sets.
  check_magicpig(make_problem(kN / 2, 64, 6, 13), {8, 75, 64}, 6, 2, {}, 2e-4);
}

TEST(SampledAttention, TinyAndAllStatic) {
  for (std::size_t n : {1, 2, 40, 68, 69, 70})
    check_magicpig(make_problem(n, 64, 3, 3 + n), {10, 150, 64}, 3, 2, {}, 2e-4);
}

TEST(SampledAttention, AdversarialInputs) {
  {
    const Config c{8, 75, 64};
    {
      // All keys equal: centered keys are zero (cosine 0 by convention), every token collides
      // in every table and is sampled.
      Problem pr = make_problem(500, 64, 2, 21);
      for (std::size_t i = 1; i < pr.n; ++i)
        for (std::size_t j = 0; j < pr.d; ++j) {
          pr.K.f32.at(i, j) = pr.K.f32.at(0, j);
          pr.K.bf16[i * pr.d + j] = pr.K.bf16[j];
        }
      check_magicpig(pr, c, 2, 2, {}, 2e-4);
    }
    {
      // Zero query: every code is 0, every logit 0.
      Problem pr = make_problem(500, 64, 1, 22);
      std::fill(pr.q.begin(), pr.q.end(), 0.0f);
      check_magicpig(pr, c, 1, 2, {}, 2e-4);
    }
    {
      // Huge norms (logits ~1e5): a one-hot softmax, no overflow anywhere.
      Problem pr = make_problem(500, 64, 1, 23);
      for (float &x : pr.q)
        x *= 1000.0f;
      check_magicpig(pr, c, 1, 2, {}, 2e-4);
    }
    {
      // NaN in a sampled-or-static key: the reference's answer is NaN, and so is ours.
      Problem pr = make_problem(500, 64, 1, 24);
      pr.K.f32.at(2, 5) = std::numeric_limits<float>::quiet_NaN();
      pr.K.bf16[2 * pr.d + 5] = 0x7FC0;
      check_magicpig(pr, c, 1, 2, {}, 2e-4, {}, Nan::expected);
    }
  }
}

// sampled_step takes d from the rows; rows of another head dim than W's are refused, not read.
TEST(SampledStep, RefusesRowsOfAnotherHeadDim) {
  const Problem pr = make_problem(300, 64, 1, 51);
  const lsh::SimHash W(kSeed, pr.d, 8, 75);
  const lsh::LshKernelSet s = lsh::generic_kernel_set();
  const lsh::LshIndex ix = lsh::LshIndex::build(s, pr.K.data(DType::f32), DType::f32, pr.n, W);
  const lsh::LogUTableData lut(8, 75, 2);
  lsh::RetrievalScratch scratch(pr.n);
  lsh::StepBuffers buf;
  std::vector<float> out(pr.d), lse(1);
  const lsh::GroupQueries queries{pr.q.data(), 1, 0.125f, out.data(), lse.data()};
  lsh::KvRows rows{pr.K.data(DType::f32), pr.V.data(DType::f32), DType::f32, pr.d / 2, {}};
  EXPECT_THROW(lsh::sampled_step(s, ix, W, lut, 2, scratch, buf, queries, rows),
               std::invalid_argument);
  rows.d = pr.d;
  lsh::sampled_step(s, ix, W, lut, 2, scratch, buf, queries, rows);
  EXPECT_TRUE(std::isfinite(lse[0]));
  // A probe radius the spec refuses (r >= K, r > 3) is refused here, not asserted in a kernel.
  for (int r : {-1, 4, 8})
    EXPECT_THROW(lsh::sampled_step(s, ix, W, lut, {2, r}, scratch, buf, queries, rows),
                 std::invalid_argument)
        << r;
}

// The masks a table is probed with: every mask of at most r of K bits, each once, by popcount
// then value, as many as spec::probes_per_table says.
TEST(ProbeMasks, TheHammingBallInOrder) {
  for (int K : {1, 2, 5, 10, 16})
    for (int r = 0; r <= std::min(3, K - 1); ++r) {
      const std::vector<std::uint16_t> m = lsh::probe_masks(K, r);
      ASSERT_EQ(int(m.size()), pig::spec::probes_per_table(K, r)) << K << " " << r;
      EXPECT_EQ(m[0], 0);
      for (std::size_t i = 1; i < m.size(); ++i) {
        const int a = std::popcount(unsigned(m[i - 1])), b = std::popcount(unsigned(m[i]));
        EXPECT_TRUE(a < b || (a == b && m[i - 1] < m[i])) << K << " " << r << " " << i;
        EXPECT_LE(b, r);
        EXPECT_LT(unsigned(m[i]), 1u << K);
      }
    }
}

TEST(DenseAttention, MatchesReference) {
  for_each_target([](const char *) {
    for (std::size_t d : {std::size_t(64), std::size_t(128), std::size_t(18)})
      for (std::size_t n : {0, 1, 15, 16, 17, 63, 64, 65, 129, 300}) // vector and block edges
        for (int G : {1, 3}) {
          const Problem pr = make_problem(std::max<std::size_t>(n, 1), d, G, 40 + n);
          const float scale = float(1.0 / std::sqrt(double(d)));
          for (DType dt : {DType::f32, DType::bf16})
            for (const LshKernelSet &s : sets_for({10, 150, int(d), dt, lsh::Target::cpu})) {
              std::vector<float> out(std::size_t(G) * d), lse(static_cast<std::size_t>(G));
              lsh::DenseAttentionArgs a;
              a.q = pr.q.data();
              a.G = G;
              a.d = d;
              a.scale = scale;
              a.k = pr.K.data(dt);
              a.v = pr.V.data(dt);
              a.dtype = dt;
              a.begin = 0;
              a.end = n;
              a.out = out.data();
              a.lse = lse.data();
              s.dense_attention(a);
              for (int h = 0; h < G; ++h) {
                const std::span<const float> qh(pr.q.data() + std::size_t(h) * d, d);
                const ref::Matrix Kn{pr.K.f32.data.data(), n, d}, Vn{pr.V.f32.data.data(), n, d};
                const ref::Attention want = ref::dense_attention(qh, Kn, Vn, double(scale));
                expect_attention_near(out.data() + std::size_t(h) * d, lse[std::size_t(h)], want,
                                      1e-5, KernelRegistry::describe(s));
              }
            }
        }
  });
}

TEST(Merge, MatchesReference) {
  for_each_target([](const char *) {
    const std::size_t d = 64;
    const LshKernelSet s = lsh::generic_kernel_set();
    const std::vector<std::pair<float, float>> lses = {
        {1.5f, -2.0f},      {-HUGE_VALF, 0.5f},
        {3.0f, -HUGE_VALF}, {-HUGE_VALF, -HUGE_VALF},
        {80.0f, 80.0f},     {std::numeric_limits<float>::quiet_NaN(), 1.0f}};
    const ref::OwnedMatrix o = gaussian(2, d, 77);
    for (const auto &[la, lb] : lses) {
      ref::Attention a{std::vector<float>(o.row(0), o.row(0) + d), la};
      ref::Attention b{std::vector<float>(o.row(1), o.row(1) + d), lb};
      if (la == -HUGE_VALF)
        a = ref::Attention::empty(d);
      if (lb == -HUGE_VALF)
        b = ref::Attention::empty(d);
      const ref::Attention want = ref::merge(a, b);
      std::vector<float> out(d);
      float lse = 0;
      lsh::MergeArgs m;
      m.out_a = a.out.data();
      m.lse_a = &la;
      m.out_b = b.out.data();
      m.lse_b = &lb;
      m.d = d;
      m.out = out.data();
      m.lse = &lse;
      s.merge(m);
      if (std::isnan(want.lse)) {
        EXPECT_TRUE(std::isnan(lse));
        continue;
      }
      EXPECT_EQ(lse == -HUGE_VALF, want.is_empty());
      if (!want.is_empty()) {
        EXPECT_NEAR(lse, want.lse, 1e-6 * std::max(1.0, std::fabs(want.lse)));
      }
      EXPECT_LT(rel_l2(out.data(), want.out), 1e-6);
    }
  });
}

} // namespace
} // namespace pig::test
