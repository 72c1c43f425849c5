#include "accuracy.h"

#include <gtest/gtest.h>

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
  // 2 budgets x 3 baselines, 2 MagicPIG configurations, 3 baselines at MagicPIG's cost.
  ASSERT_EQ(pts[0].size(), 6u + 2u + 3u);
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
}

} // namespace
} // namespace pig::eval
