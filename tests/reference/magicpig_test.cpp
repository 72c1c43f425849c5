// The MagicPIG estimator: static/sampled split, the sampling rule, importance weights, merging.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "pig/reference/attention.h"
#include "pig/reference/lsh.h"
#include "pig/reference/magicpig.h"
#include "pig/reference/random.h"
#include "pig/reference/synthetic.h"
#include "test_util.h"

namespace pig::ref {
namespace {

using testing::expect_unbiased_over_w;
using testing::gaussian_matrix;
using testing::gaussian_vector;

AttentionProblem small_problem(std::uint64_t seed, std::size_t n = 2048, std::size_t d = 32) {
  return testing::synthetic_head(seed, n, d, 1.5, 0.2);
}

TEST(MagicPig, SplitsTokensIntoSinkIndexedAndLocal) {
  const TokenSplit s = split_tokens(100, {4, 64});
  EXPECT_EQ(s.indexed_begin, 4u);
  EXPECT_EQ(s.indexed_end, 36u);
  EXPECT_EQ(s.indexed(), 32u);
  EXPECT_EQ(s.static_tokens(), 68u);
  const auto ids = s.static_ids();
  ASSERT_EQ(ids.size(), 68u);
  EXPECT_EQ(ids[3], 3u);
  EXPECT_EQ(ids[4], 36u);
  EXPECT_EQ(ids.back(), 99u);
  EXPECT_EQ(split_tokens(68, {4, 64}).indexed(), 0u);
  EXPECT_EQ(split_tokens(69, {4, 64}).indexed(), 1u);
  EXPECT_EQ(split_tokens(3, {4, 64}).static_tokens(), 3u);
}

TEST(MagicPig, AllStaticIsExactlyDense) {
  Rng rng(20);
  const std::size_t d = 16;
  const LshConfig cfg{4, 8, 2, 1};
  const OwnedMatrix W = simhash_matrix(cfg.seed, d, cfg.K, cfg.L);
  for (std::size_t n : {1, 5, 67, 68}) { // n <= sink + local
    const auto q = gaussian_vector(rng, d);
    const auto K = gaussian_matrix(rng, n, d);
    const auto V = gaussian_matrix(rng, n, d);
    const MagicPigResult r = magicpig_attention(q, K, V, W, cfg);
    const Attention dense = dense_attention(q, K, V);
    EXPECT_EQ(r.attention.out, dense.out) << "n=" << n;
    EXPECT_EQ(r.attention.lse, dense.lse);
    EXPECT_TRUE(r.sample.empty());
    EXPECT_EQ(r.indexed, 0u);
    EXPECT_EQ(r.cost(), 0.0);
  }
}

TEST(MagicPig, SampleSetAndWeightsFollowTheDefinition) {
  const AttentionProblem p = small_problem(21, 1000, 32);
  const LshConfig cfg{4, 10, 2, 5};
  const OwnedMatrix W = simhash_matrix(cfg.seed, 32, cfg.K, cfg.L);
  const LshIndex index = build_index(p.K, W, cfg);
  const Centered c = center(p.K, 4, 1000 - 64);
  EXPECT_EQ(index.mean, c.mean);
  const auto qcodes = encode(p.q, W, cfg);
  const SampledPart part = sample_tokens(p.q, W, index);
  std::vector<std::size_t> expected;
  for (std::size_t i = 4; i < 1000 - 64; ++i)
    if (count_collisions(qcodes, encode(c.keys.row_span(i), W, cfg)) >= cfg.t)
      expected.push_back(i);
  EXPECT_EQ(part.sample, expected);
  ASSERT_FALSE(expected.empty());
  for (std::size_t j = 0; j < part.sample.size(); ++j) {
    const double u =
        collision_probability(cosine(p.q, c.keys.row_span(part.sample[j])), cfg.K, cfg.L, cfg.t);
    EXPECT_NEAR(part.log_u[j], std::log(u), 1e-12);
  }
}

TEST(MagicPig, StaticMergedWithSampledEqualsOneSoftmax) {
  for (std::uint64_t seed : {22, 23, 24}) {
    const AttentionProblem p = small_problem(seed);
    const LshConfig cfg{5, 20, 2, seed};
    const OwnedMatrix W = simhash_matrix(cfg.seed, 32, cfg.K, cfg.L);
    const LshIndex index = build_index(p.K, W, cfg);
    const MagicPigResult one = magicpig_attention(p.q, p.K, p.V, W, index);
    const Attention st = static_attention(p.q, p.K, p.V, index.split);
    const SampledPart sa = sampled_attention(p.q, p.K, p.V, W, index);
    ASSERT_FALSE(sa.sample.empty());
    EXPECT_EQ(sa.sample, one.sample);
    const Attention merged = merge(st, sa.attention);
    EXPECT_LT(relative_l2_error(merged.out, one.attention.out), 1e-6);
    EXPECT_NEAR(merged.lse, one.attention.lse, 1e-9);
    EXPECT_DOUBLE_EQ(one.cost(), double(one.sample.size()) / double(index.split.indexed()));
    EXPECT_EQ(one.static_tokens, 68u);
  }
}

// The importance weights make the estimator's pieces unbiased over the draw of W: token i is in
// S with probability exactly u_i, so E[sum_{i in S} e^{z_i} / u_i] = sum_i e^{z_i}. Hence
// exp(lse_magicpig - lse_dense) has mean 1 and exp(lse_magicpig - lse_dense) * out has mean o
// (the numerator of the self-normalised estimate). Checked over 400 independent W, within
// z = 5 standard errors of the sample mean (sample sd / sqrt(400)): an end-to-end test of
// centering, hashing, the sampling rule and the collision probability together.
TEST(MagicPig, ImportanceWeightsAreUnbiasedOverW) {
  const std::size_t n = 200, d = 16, draws = 400;
  const AttentionProblem p = small_problem(26, n, d);
  const Attention exact = dense_attention(p.q, p.K, p.V);
  const double sampled = expect_unbiased_over_w(exact, draws, [&](std::size_t r) {
    const LshConfig cfg{3, 6, 2, 1000 + r};
    const OwnedMatrix W = simhash_matrix(cfg.seed, d, cfg.K, cfg.L);
    return magicpig_attention(p.q, p.K, p.V, W, cfg);
  });
  EXPECT_GT(sampled, 5.0);        // the sample set is neither empty...
  EXPECT_LT(sampled, n - 68 - 5); // ...nor everything, so the test has teeth
}

// The same with multi-probe (ALGORITHM.md section 5): fewer tables, each probed within r bits,
// the weights from q_r in place of p^K.
TEST(MagicPig, MultiProbeWeightsAreUnbiasedOverW) {
  const std::size_t n = 200, d = 16, draws = 400;
  const AttentionProblem p = small_problem(27, n, d);
  const Attention exact = dense_attention(p.q, p.K, p.V);
  for (int r : {1, 2}) {
    const double sampled = expect_unbiased_over_w(exact, draws, [&](std::size_t i) {
      const LshConfig cfg{5, 4, 2, 2000 + i, r};
      const OwnedMatrix W = simhash_matrix(cfg.seed, d, cfg.K, cfg.L);
      return magicpig_attention(p.q, p.K, p.V, W, cfg);
    });
    EXPECT_GT(sampled, 5.0) << "r=" << r;
    EXPECT_LT(sampled, n - 68 - 5) << "r=" << r;
  }
}

// u = 0 happens only for a centered key exactly opposite the query, which a Gaussian W never
// samples; a degenerate all-zero W (every code 0, everything collides) forces it. The weight must
// stay finite: u is clamped to the smallest positive double.
TEST(MagicPig, UnderflowingUIsClampedToTheSmallestPositiveDouble) {
  const std::size_t d = 3, n = 70; // 4 sink + 64 local: tokens 4 and 5 are indexed
  OwnedMatrix K(n, d), V(n, d);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < d; ++j) {
      K.at(i, j) = 3.0f;
      V.at(i, j) = float(i % 7) - 3.0f;
    }
  const std::vector<float> q = {1.0f, 2.0f, 0.0f};
  // Mean of the indexed keys is (3, 3, 3); centered: token 4 = -q, token 5 = +q (exactly).
  K.at(4, 0) = 2.0f, K.at(4, 1) = 1.0f;
  K.at(5, 0) = 4.0f, K.at(5, 1) = 5.0f;
  const LshConfig cfg{4, 8, 2, 0};
  const OwnedMatrix W(d, cfg.columns()); // all zeros
  const LshIndex index = build_index(K, W, cfg);
  const SampledPart part = sample_tokens(q, W, index);
  ASSERT_EQ(part.sample, (std::vector<std::size_t>{4, 5}));
  EXPECT_EQ(part.log_u[0], std::log(std::numeric_limits<double>::denorm_min()));
  EXPECT_EQ(part.log_u[1], 0.0);
  const MagicPigResult r = magicpig_attention(q, K, V, W, index);
  EXPECT_TRUE(std::isfinite(r.attention.lse));
  for (float x : r.attention.out)
    EXPECT_TRUE(std::isfinite(x));
}

// Raw (uncentered) keys in the cone opposite the query have cosine ~ -0.76 with it, so one table
// of K = 16 bits collides with probability ~ (1 - acos(-0.76) / pi)^16 ~ 1e-10: S is empty (for
// these fixed seeds, certainly) and the estimate is the static part alone.
TEST(MagicPig, EmptySampleSetLeavesTheStaticPart) {
  const AttentionProblem p = small_problem(25, 500, 32);
  const LshConfig cfg{16, 1, 1, 3};
  const OwnedMatrix W = simhash_matrix(cfg.seed, 32, cfg.K, cfg.L);
  const LshIndex index = build_index(p.K, W, cfg, {}, Centering::none);
  const MagicPigResult r = magicpig_attention(p.q, p.K, p.V, W, index);
  ASSERT_TRUE(r.sample.empty());
  EXPECT_EQ(r.cost(), 0.0);
  const Attention st = static_attention(p.q, p.K, p.V, index.split);
  EXPECT_EQ(r.attention.out, st.out);
  EXPECT_EQ(r.attention.lse, st.lse);
  EXPECT_TRUE(sampled_attention(p.q, p.K, p.V, W, index).attention.is_empty());
}

// The estimate approaches dense attention as L grows (more tables: a sample set closer to
// everything relevant, smaller variance). Mean over 4 seeds; at L = 200 with K = 6, t = 2, u is
// close to 1 for most tokens, so the expected gap is large (observed: mean error 0.12 at L = 10,
// cost ~4%; 0.0045 at L = 200, cost ~70%).
TEST(MagicPig, ErrorShrinksAsLGrows) {
  double err10 = 0.0, err200 = 0.0;
  const int seeds = 4;
  for (int s = 0; s < seeds; ++s) {
    const AttentionProblem p = small_problem(30 + std::uint64_t(s), 1024, 16);
    const Attention exact = dense_attention(p.q, p.K, p.V);
    const OwnedMatrix W = simhash_matrix(40 + std::uint64_t(s), 16, 6, 200);
    for (int L : {10, 200}) {
      const LshConfig cfg{6, L, 2, 40 + std::uint64_t(s)};
      const MagicPigResult r = magicpig_attention(p.q, p.K, p.V, W, cfg);
      (L == 10 ? err10 : err200) += relative_l2_error(r.attention.out, exact.out) / seeds;
    }
  }
  EXPECT_LT(err200, err10);
  EXPECT_LT(2.0 * err200, err10);
}

// Keys in a cone opposite the query (the synthetic problem's cone axis sits at cosine -0.8 with
// the query, 3 noise norms from the origin): raw keys almost never collide with the query, the
// centered keys do. Deterministic seeds; observed cost 4-6% centered vs 0 raw.
TEST(MagicPig, CenteringRaisesTheSampledFraction) {
  for (std::uint64_t seed : {50, 51}) {
    const AttentionProblem p = small_problem(seed, 1024, 32);
    const LshConfig cfg{8, 40, 2, seed};
    const OwnedMatrix W = simhash_matrix(cfg.seed, 32, cfg.K, cfg.L);
    const MagicPigResult with =
        magicpig_attention(p.q, p.K, p.V, W, cfg, {}, Centering::mean_of_indexed);
    const MagicPigResult without = magicpig_attention(p.q, p.K, p.V, W, cfg, {}, Centering::none);
    EXPECT_GT(with.cost(), 5.0 * without.cost()) << "seed " << seed;
    EXPECT_GT(with.cost(), 0.001);
    const Attention exact = dense_attention(p.q, p.K, p.V);
    EXPECT_LT(relative_l2_error(with.attention.out, exact.out),
              relative_l2_error(without.attention.out, exact.out));
  }
}

// GQA: query heads of one group read the same kv-head, hence the same index.
TEST(MagicPig, GqaHeadsShareTheirKvHeadIndex) {
  const std::size_t n_heads = 8, n_kv = 2, d = 16, n = 300;
  Rng rng(60);
  std::vector<OwnedMatrix> Ks, Vs;
  for (std::size_t h = 0; h < n_kv; ++h) {
    Ks.push_back(gaussian_matrix(rng, n, d));
    Vs.push_back(gaussian_matrix(rng, n, d));
  }
  const LshConfig cfg{4, 16, 2, 7};
  const OwnedMatrix W = simhash_matrix(cfg.seed, d, cfg.K, cfg.L);
  std::vector<LshIndex> index;
  for (std::size_t h = 0; h < n_kv; ++h)
    index.push_back(build_index(Ks[h], W, cfg));
  for (std::size_t h = 0; h < n_heads; ++h) {
    const std::size_t kv = kv_head_for(h, n_heads, n_kv);
    EXPECT_EQ(kv, h / 4);
    const auto q = gaussian_vector(rng, d);
    const auto a = magicpig_attention(q, Ks[kv], Vs[kv], W, index[kv]);
    const auto b = magicpig_attention(q, Ks[kv], Vs[kv], W, cfg);
    EXPECT_EQ(a.attention.out, b.attention.out);
  }
  EXPECT_THROW(kv_head_for(0, 8, 3), std::invalid_argument);
}

TEST(MagicPig, InvalidInputsThrowAndNaNPropagates) {
  const AttentionProblem p = small_problem(70, 200, 16);
  const OwnedMatrix W = simhash_matrix(1, 16, 4, 8);
  EXPECT_THROW(magicpig_attention(p.q, p.K, p.V, W, LshConfig{0, 8, 2, 1}), std::invalid_argument);
  EXPECT_THROW(magicpig_attention(p.q, p.K, p.V, W, LshConfig{4, 8, 9, 1}), std::invalid_argument);
  EXPECT_THROW(magicpig_attention(p.q, p.K, p.V, W, LshConfig{4, 9, 2, 1}),
               std::invalid_argument); // W too small
  const LshIndex index = build_index(p.K, W, LshConfig{4, 8, 2, 1});
  const AttentionProblem other = small_problem(71, 300, 16);
  EXPECT_THROW(magicpig_attention(other.q, other.K, other.V, W, index), std::invalid_argument);
  auto q = p.q;
  q[0] = std::numeric_limits<float>::quiet_NaN();
  const MagicPigResult r = magicpig_attention(q, p.K, p.V, W, index);
  EXPECT_TRUE(std::isnan(r.attention.lse));
  for (float x : r.attention.out)
    EXPECT_TRUE(std::isnan(x));
}

} // namespace
} // namespace pig::ref
