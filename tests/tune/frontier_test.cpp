#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include <gtest/gtest.h>

#include "pig/tune/frontier.h"

namespace pig::tune {
namespace {

TEST(Frontier, KeepsExactlyTheUndominatedPoints) {
  const std::vector<Measured> p = {
      {{}, 0.05, 0.10}, // 0: frontier
      {{}, 0.02, 0.30}, // 1: frontier (cheapest)
      {{}, 0.06, 0.12}, // 2: dominated by 0
      {{}, 0.10, 0.04}, // 3: frontier
      {{}, 0.05, 0.10}, // 4: equal to 0: adds nothing
      {{}, 0.20, 0.04}, // 5: dominated by 3 (equal error, dearer)
  };
  EXPECT_EQ(pareto_frontier(p), (std::vector<std::size_t>{1, 0, 3}));
  EXPECT_TRUE(pareto_frontier({}).empty());
}

TEST(Frontier, EqualCostKeepsOnlyTheMoreAccurate) {
  // Equal cost, different error: the more accurate point dominates the other, whichever comes
  // first; with equal error too, the first index stands for both.
  const std::vector<Measured> p = {
      {{}, 0.05, 0.20}, // 0: dominated by 1 (same cost, more error)
      {{}, 0.05, 0.10}, // 1: frontier
      {{}, 0.08, 0.10}, // 2: dominated by 1 (same error, dearer)
      {{}, 0.08, 0.05}, // 3: frontier
      {{}, 0.08, 0.05}, // 4: equal to 3: adds nothing
      {{}, 0.08, 0.07}, // 5: dominated by 3
  };
  EXPECT_EQ(pareto_frontier(p), (std::vector<std::size_t>{1, 3}));
  const std::vector<Measured> r = {p[1], p[0]};
  EXPECT_EQ(pareto_frontier(r), (std::vector<std::size_t>{0}));
}

TEST(Frontier, PointsDifferingOnlyInT) {
  // A higher threshold t is cheaper and less accurate at the same (K, L): ordered by t alone.
  const Candidate t1{8, 75, 1}, t2{8, 75, 2}, t3{8, 75, 3};
  EXPECT_TRUE(at_least_as_expensive(t1, t2));
  EXPECT_TRUE(at_least_as_expensive(t2, t3));
  EXPECT_FALSE(at_least_as_expensive(t3, t1));
  EXPECT_FALSE(at_least_as_expensive(t2, t1));
  // Measured as the order says, every t trades cost for error: all on the frontier, cheapest
  // (highest t) first; a t whose measurement is worse than its neighbour's on both is not.
  const std::vector<Measured> p = {{t1, 0.09, 0.02}, {t2, 0.04, 0.06}, {t3, 0.02, 0.15}};
  EXPECT_EQ(pareto_frontier(p), (std::vector<std::size_t>{2, 1, 0}));
  const std::vector<Measured> q = {{t1, 0.09, 0.02}, {t2, 0.10, 0.06}, {t3, 0.02, 0.15}};
  EXPECT_EQ(pareto_frontier(q), (std::vector<std::size_t>{2, 0}));
  // The explorer bounds t = 2 by t = 1 and t = 3: cost >= t3's, error >= t1's. Measured as the
  // order says, nothing dominates that box: t = 2 is measured.
  Explorer ex({t3, t1, t2});
  EXPECT_EQ(*ex.next(), 0u); // t3: the cheapest
  ex.report(0, 0.02, 0.15);
  EXPECT_EQ(*ex.next(), 1u); // t1: the dearest
  ex.report(1, 0.09, 0.02);
  EXPECT_EQ(ex.next(), std::optional<std::size_t>(2));
  EXPECT_EQ(ex.skipped(), 0u);
  // When the cheaper t = 3 measures as accurate as t = 1 (noise), t = 2 cannot improve: skipped.
  Explorer noisy({t3, t1, t2});
  EXPECT_EQ(*noisy.next(), 0u);
  noisy.report(0, 0.02, 0.02);
  EXPECT_EQ(*noisy.next(), 1u);
  noisy.report(1, 0.09, 0.05);
  EXPECT_EQ(noisy.next(), std::nullopt);
  EXPECT_EQ(noisy.skipped(), 1u);
}

TEST(Frontier, PartialOrderOfConfigurations) {
  const Candidate a{8, 150, 2}, b{10, 75, 2}, c{10, 150, 3}, d{8, 75, 2};
  EXPECT_TRUE(at_least_as_expensive(a, b)); // fewer bits, more tables
  EXPECT_FALSE(at_least_as_expensive(b, a));
  EXPECT_FALSE(at_least_as_expensive(c, d)); // more bits but more tables: unrelated
  EXPECT_FALSE(at_least_as_expensive(d, c));
  EXPECT_TRUE(at_least_as_expensive(Candidate{{0, 0, 0}, true}, a));
  EXPECT_FALSE(at_least_as_expensive(a, Candidate{{0, 0, 0}, true}));
}

// A synthetic, monotone model of (K, L, t): cost falls with K and t and rises with L; error the
// opposite. The explorer must find the same frontier as measuring everything, with fewer
// measurements.
struct Model {
  double cost(const Candidate &c) const {
    return c.dense ? 1.0 : double(c.L) * std::pow(0.5, 0.8 * c.K) * std::pow(0.6, c.t);
  }
  // Monotone in the partial order (cheaper: error up), with configurations of a similar cost
  // differing in error (a higher t or K costs accuracy), so that many points are dominated.
  double error(const Candidate &c) const {
    return c.dense ? 0.0 : (1.0 + 1.5 * (c.t - 1)) * (1.0 + 0.05 * c.K) / (1.0 + 40.0 * cost(c));
  }
};

std::vector<Candidate> grid() {
  std::vector<Candidate> g;
  for (int K : {6, 7, 8, 9, 10, 11, 12})
    for (int L : {32, 64, 75, 100, 120, 150, 200})
      for (int t : {1, 2, 3})
        g.push_back({K, L, t});
  return g;
}

TEST(Explorer, FindsTheFullFrontierWithFewerMeasurements) {
  const Model m;
  const std::vector<Candidate> g = grid();
  std::vector<Measured> all;
  for (const Candidate &c : g)
    all.push_back({c, m.cost(c), m.error(c)});
  // The expected frontier by brute force (not by pareto_frontier, which the explorer uses): a
  // point is on it when no other point is at most as dear and as inaccurate with one strictly
  // less, and no earlier point is equal to it.
  std::vector<Candidate> want;
  for (std::size_t i = 0; i < all.size(); ++i) {
    bool dominated = false;
    for (std::size_t j = 0; j < all.size() && !dominated; ++j) {
      const bool le = all[j].cost <= all[i].cost && all[j].error <= all[i].error;
      const bool lt = all[j].cost < all[i].cost || all[j].error < all[i].error;
      dominated = j != i && le && (lt || j < i);
    }
    if (!dominated)
      want.push_back(all[i].c);
  }

  Explorer ex(g, 7);
  std::size_t evals = 0;
  while (auto i = ex.next()) {
    ex.report(*i, m.cost(g[*i]), m.error(g[*i]));
    ++evals;
  }
  std::vector<Candidate> got;
  for (std::size_t i : ex.frontier())
    got.push_back(ex.measured()[i].c);
  auto by_config = [](const Candidate &a, const Candidate &b) {
    return std::tie(a.K, a.L, a.t) < std::tie(b.K, b.L, b.t);
  };
  std::sort(got.begin(), got.end(), by_config);
  std::sort(want.begin(), want.end(), by_config);
  EXPECT_LT(want.size(), g.size() / 2); // the model leaves most points dominated
  EXPECT_EQ(got, want);
  EXPECT_EQ(evals + ex.skipped(), g.size());
  EXPECT_GT(ex.skipped(), 0u);
  // The cheapest and the most expensive candidates come first.
  Explorer first(g, 7);
  EXPECT_EQ(g[*first.next()], (Candidate{12, 32, 3}));
  EXPECT_EQ(g[*first.next()], (Candidate{6, 200, 1}));
}

TEST(Explorer, NothingIsSkippedWhenNothingIsRelated) {
  // K and L both rise: no two candidates are ordered, so no bound exists.
  const std::vector<Candidate> g = {{6, 32, 2}, {8, 64, 2}, {10, 128, 2}, {12, 256, 2}};
  Explorer ex(g);
  std::size_t evals = 0;
  while (auto i = ex.next()) {
    ex.report(*i, 1.0 / double(evals + 1), double(evals));
    ++evals;
  }
  EXPECT_EQ(evals, g.size());
  EXPECT_EQ(ex.skipped(), 0u);
}

TEST(Select, CheapestUnderAnErrorWithDeterministicTies) {
  const std::vector<Measured> p = {
      {{10, 150, 2}, 0.030, 0.08}, // 0
      {{8, 75, 2}, 0.0301, 0.09},  // 1: within 2 % of 0's cost, fewer projections
      {{7, 64, 2}, 0.050, 0.20},   // 2
      {{12, 200, 2}, 0.010, 0.30}, // 3: cheapest, too inaccurate
  };
  EXPECT_EQ(select_max_error(p, 0.1), 1u);      // tie on cost: smaller K * L wins
  EXPECT_EQ(select_max_error(p, 0.1, 0.0), 0u); // no tolerance: the strictly cheapest
  EXPECT_EQ(select_max_error(p, 0.5), 3u);
  EXPECT_EQ(select_max_error(p, 0.01), std::nullopt);
  // Equal projections: the earlier (manifest) order wins, never the timing.
  const std::vector<Measured> q = {{{10, 150, 2}, 0.0300, 0.1}, {{15, 100, 2}, 0.0299, 0.1}};
  EXPECT_EQ(select_max_error(q, 0.2), 0u);
}

TEST(Select, MostAccurateUnderACost) {
  const std::vector<Measured> p = {
      {{10, 150, 2}, 0.030, 0.080}, // 0
      {{9, 120, 2}, 0.028, 0.081},  // 1: error within 2 % of 0's, fewer projections
      {{6, 200, 1}, 0.300, 0.010},  // 2: too dear
  };
  EXPECT_EQ(select_max_cost(p, 0.05), 1u);
  EXPECT_EQ(select_max_cost(p, 1.0), 2u);
  EXPECT_EQ(select_max_cost(p, 0.001), std::nullopt);
}

} // namespace
} // namespace pig::tune
