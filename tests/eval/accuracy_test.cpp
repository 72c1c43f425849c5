#include "pig/eval/accuracy.h"

#include <gtest/gtest.h>

#include <cmath>

namespace pig::eval {
namespace {

using namespace pig::ref;

TEST(Recode, MatchesEncodingWithTheNarrowConfigurationDirectly) {
  const OwnedMatrix W = simhash_matrix(5, 16, 10, 150);
  SyntheticConfig sc;
  sc.n = 64;
  sc.d = 16;
  sc.seed = 3;
  const AttentionProblem p = synthetic_problem(sc);
  const LshConfig wide{10, 150, 2, 5}, narrow{8, 75, 2, 5};
  EXPECT_EQ(Recode(encode_rows(p.K, W, wide), wide, narrow), encode_rows(p.K, W, narrow));
  EXPECT_THROW(Recode({}, narrow, wide), std::invalid_argument);
}

TEST(OracleBudget, SmallestBudgetReachingTheTarget) {
  const std::vector<double> w = {0.5, 0.25, 0.125, 0.125};
  for (double target : {1.0, 1.5, 2.5, 3.5}) {
    const std::size_t B = OracleBudget(w, target);
    EXPECT_GE(expected_unique_draws(w, B), target);
    if (B > 1) {
      EXPECT_LT(expected_unique_draws(w, B - 1), target);
    }
  }
}

TEST(MeasureGroup, ErrorsShrinkWithBudgetAndCostsMatch) {
  SyntheticConfig sc;
  sc.n = 512;
  sc.d = 32;
  sc.seed = 9;
  const AttentionProblem p = synthetic_problem(sc);
  const OwnedMatrix W = simhash_matrix(1, 32, 10, 150);
  ErrorOptions opt;
  opt.budgets = {0.02, 0.5};
  opt.magicpig = {{10, 150}, {6, 32}};
  opt.matched = 1;
  const auto pts = MeasureGroup({p.q}, p.K, p.V, W, opt);
  ASSERT_EQ(pts.size(), 1u);
  // 2 budgets x (3 baselines + LSH-hybrid), 2 MagicPIG configurations, 3 baselines and
  // LSH-hybrid at MagicPIG's cost.
  ASSERT_EQ(pts[0].size(), 8u + 2u + 4u);
  auto find = [&](const std::string &m, const std::string &c) {
    for (const ErrorPoint &e : pts[0])
      if (e.method == m && e.config == c)
        return e;
    ADD_FAILURE() << m << " " << c;
    return ErrorPoint{};
  };
  // 512 tokens, 68 static: 444 indexed; TopK reads round(b * 444), Quest whole pages of 16.
  EXPECT_DOUBLE_EQ(find("TopK", "b=50%").cost, 222.0 / 444.0);
  EXPECT_DOUBLE_EQ(find("Quest", "b=50%").cost, 224.0 / 444.0);
  for (const char *m : {"TopK", "Quest", "Oracle"})
    EXPECT_LT(find(m, "b=50%").error, find(m, "b=2%").error) << m;
  EXPECT_LT(find("TopK", "b=50%").error, 0.05);
  const ErrorPoint mp = find("MagicPIG", "K=10 L=150");
  EXPECT_GT(mp.cost, 0.0);
  EXPECT_LT(mp.cost, 1.0);
  EXPECT_NEAR(find("TopK", "= MagicPIG 10,150").cost, mp.cost, 1.0 / 444.0);
  // LSH-hybrid's cost is its head plus a Poisson draw of expected size the rest of the budget.
  const std::string hy = " head=0.25 floor=0.1 hamming";
  EXPECT_LT(find("LSH-hybrid", "b=50%" + hy).error, find("LSH-hybrid", "b=2%" + hy).error);
  EXPECT_NEAR(find("LSH-hybrid", "b=50%" + hy).cost, 0.5, 0.06);
  EXPECT_NEAR(find("LSH-hybrid", "= MagicPIG 10,150" + hy).cost, mp.cost, 0.5 * mp.cost + 0.02);
}

// reuse = R: the selection made with the query R - 1 steps back over the first n - (R - 1) rows,
// attended by the measured query. With the same query and R - 1 new rows appended after the old
// ones, it reads the old selection plus the R - 1 tokens that left the local window; without the
// earlier queries, or reaching back past the indexed part, it refuses.
TEST(MeasureGroup, AReusedSelectionIsMadeWithTheEarlierQuery) {
  SyntheticConfig sc;
  sc.n = 512;
  sc.d = 32;
  sc.seed = 9;
  const AttentionProblem p = synthetic_problem(sc);
  const OwnedMatrix W = simhash_matrix(1, 32, 10, 150);
  ErrorOptions opt;
  opt.budgets = {0.5};
  opt.magicpig = {{10, 150}};
  opt.matched = 1;
  HybridConfig fresh, reused;
  reused.reuse = 5;
  opt.hybrid = {fresh, reused};
  EXPECT_THROW(MeasureGroup({p.q}, p.K, p.V, W, opt), std::invalid_argument);
  std::vector<std::size_t> lags;
  const auto pts = MeasureGroup({p.q}, p.K, p.V, W, opt, [&](std::size_t lag) {
    lags.push_back(lag);
    return std::vector<std::vector<float>>{p.q};
  });
  EXPECT_EQ(lags, std::vector<std::size_t>{4});
  auto find = [&](const std::string &c) {
    for (const ErrorPoint &e : pts[0])
      if (e.method == "LSH-hybrid" && e.config == c)
        return e;
    ADD_FAILURE() << c;
    return ErrorPoint{};
  };
  const std::string hy = " head=0.25 floor=0.1 hamming";
  const ErrorPoint now = find("b=50%" + hy), old = find("b=50%" + hy + " reuse=5");
  // 508 rows then: 440 indexed, the selection ~ half of them; 4 more exact tokens now of 444.
  EXPECT_NEAR(old.cost, (0.5 * 440 + 4) / 444.0, 0.06);
  EXPECT_GT(old.error, 0.0);
  EXPECT_NE(old.error, now.error);
  // Reaching back before the indexed part: 512 - 449 = 63 rows, fewer than sink + local.
  opt.hybrid = {fresh};
  opt.hybrid[0].reuse = 450;
  EXPECT_THROW(MeasureGroup({p.q}, p.K, p.V, W, opt,
                            [&](std::size_t) { return std::vector<std::vector<float>>{p.q}; }),
               std::invalid_argument);
}

} // namespace
} // namespace pig::eval

namespace pig::eval {
namespace {

TEST(ErrorAtCost, InterpolatesTheFrontierInLogCost) {
  // (1 %, 0.4), (4 %, 0.2) on the frontier; (2 %, 0.5) is dominated (a cheaper point is better).
  const std::vector<std::pair<double, double>> pts{{0.04, 0.2}, {0.01, 0.4}, {0.02, 0.5}};
  EXPECT_DOUBLE_EQ(*ErrorAtCost(pts, 0.01), 0.4);
  EXPECT_DOUBLE_EQ(*ErrorAtCost(pts, 0.04), 0.2);
  EXPECT_NEAR(*ErrorAtCost(pts, 0.02), 0.3, 1e-12); // halfway in log cost
  EXPECT_FALSE(ErrorAtCost(pts, 0.005));            // no extrapolation
  EXPECT_FALSE(ErrorAtCost(pts, 0.05));
  EXPECT_FALSE(ErrorAtCost({}, 0.01));
  EXPECT_FALSE(ErrorAtCost({{0.0, 0.1}, {0.01, NAN}}, 0.01)); // no usable point
  // Equal costs: the lower error stands.
  EXPECT_DOUBLE_EQ(*ErrorAtCost({{0.01, 0.4}, {0.01, 0.3}, {0.02, 0.1}}, 0.01), 0.3);
  // A dearer point that is worse than a cheaper one is off the frontier.
  EXPECT_DOUBLE_EQ(*ErrorAtCost({{0.01, 0.4}, {0.02, 0.1}, {0.04, 0.3}}, 0.02), 0.1);
  EXPECT_FALSE(ErrorAtCost({{0.01, 0.4}, {0.02, 0.1}, {0.04, 0.3}}, 0.03));
}

// Each (transform, grid point) equals pig::ref run on its own (its own index, its own W): the
// shared index and Recode change nothing.
TEST(MeasureTransformGrid, EqualsTheReferenceRunPerConfiguration) {
  SyntheticConfig sc;
  sc.n = 400;
  sc.d = 16;
  sc.seed = 4;
  const AttentionProblem p = synthetic_problem(sc);
  TransformGridOptions opt;
  for (const char *t : {"plain", "pca:r=8", "whiten:a=0.5", "mips:q=0.9"})
    opt.transforms.push_back(TransformSpec::parse(t));
  opt.grid = {{6, 20}, {8, 30}, {5, 12}};
  const std::vector<std::vector<float>> qs{p.q, std::vector<float>(p.q.rbegin(), p.q.rend())};
  const auto pts = MeasureTransformGrid(qs, p.K, p.V, opt);
  ASSERT_EQ(pts.size(), 2u);
  ASSERT_EQ(pts[0].size(), 12u);
  bool some_sampled = false;
  for (std::size_t i = 0; i < qs.size(); ++i)
    for (const TransformPoint &tp : pts[i]) {
      const TransformSpec &spec = opt.transforms[tp.transform];
      const KL kl = opt.grid[tp.grid];
      const LshConfig cfg{kl.K, kl.L, opt.threshold, opt.seed};
      // W of the widest configuration (8, 30): the narrower ones are its column prefixes.
      const OwnedMatrix W = simhash_matrix(opt.seed, spec.hashed_dim(16), 8, 30);
      const MagicPigResult r = magicpig_attention(qs[i], p.K, p.V, W, cfg, opt.statics,
                                                  Centering::mean_of_indexed, {}, spec);
      const Attention exact = dense_attention(qs[i], p.K, p.V);
      EXPECT_EQ(tp.cost, r.cost()) << spec.str() << " K=" << kl.K;
      EXPECT_EQ(tp.error, relative_l2_error(r.attention.out, exact.out)) << spec.str();
      some_sampled |= r.cost() > 0;
    }
  EXPECT_TRUE(some_sampled);
  opt.grid.clear();
  EXPECT_THROW(MeasureTransformGrid(qs, p.K, p.V, opt), std::invalid_argument);
}

// Each multi-probe configuration equals pig::ref run on its own (its own index and W, its r): the
// shared 16-bit codes and Recode change nothing; r = 0 is plain MagicPIG.
TEST(MeasureProbeGrid, EqualsTheReferenceRunPerConfiguration) {
  SyntheticConfig sc;
  sc.n = 400;
  sc.d = 16;
  sc.seed = 5;
  const AttentionProblem p = synthetic_problem(sc);
  ProbeGridOptions opt;
  opt.configs = {{6, 20, 2, 0}, {8, 10, 2, 1}, {9, 12, 1, 2}, {7, 30, 3, 1}};
  const std::vector<std::vector<float>> qs{p.q, std::vector<float>(p.q.rbegin(), p.q.rend())};
  const auto pts = MeasureProbeGrid(qs, p.K, p.V, opt);
  ASSERT_EQ(pts.size(), 2u);
  ASSERT_EQ(pts[0].size(), opt.configs.size());
  bool some_sampled = false;
  for (std::size_t i = 0; i < qs.size(); ++i)
    for (const ProbePoint &pp : pts[i]) {
      const LshConfig cfg(opt.configs[pp.config], opt.seed);
      const OwnedMatrix W = simhash_matrix(opt.seed, 16, cfg.K, cfg.L);
      const MagicPigResult r = magicpig_attention(qs[i], p.K, p.V, W, cfg, opt.statics);
      const Attention exact = dense_attention(qs[i], p.K, p.V);
      EXPECT_EQ(pp.cost, r.cost()) << cfg.str();
      EXPECT_EQ(pp.error, relative_l2_error(r.attention.out, exact.out)) << cfg.str();
      some_sampled |= r.cost() > 0;
    }
  EXPECT_TRUE(some_sampled);
  opt.configs = {{6, 20, 2, 6}};
  EXPECT_THROW(MeasureProbeGrid(qs, p.K, p.V, opt), std::invalid_argument);
  opt.configs.clear();
  EXPECT_THROW(MeasureProbeGrid(qs, p.K, p.V, opt), std::invalid_argument);
}

} // namespace
} // namespace pig::eval
