// pig::ref::hybrid_attention (LSH-hybrid): the ranker, the exact head, the Horvitz-Thompson tail
// and the central-limit budget, on random, synthetic and adversarial inputs.
#include "pig/reference/hybrid.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include <gtest/gtest.h>

#include "pig/reference/lsh.h"
#include "pig/reference/synthetic.h"
#include "test_util.h"

namespace pig::ref {
namespace {

using testing::gaussian_matrix;
using testing::gaussian_vector;

// A synthetic problem shaped like a real head (sink, peaked tail, values following scores).
AttentionProblem problem(std::uint64_t seed, std::size_t n = 2000, std::size_t d = 32) {
  return testing::synthetic_head(seed, n, d, 2.0, 0.3);
}

struct Head { // a problem, its W and its index
  AttentionProblem p;
  OwnedMatrix W;
  LshIndex index;
};

Head setup(std::uint64_t seed, std::size_t n = 2000, std::size_t d = 32, int K = 6, int L = 40) {
  Head s{problem(seed, n, d), {}, {}};
  const LshConfig cfg{K, L, std::min(L, 2), seed};
  s.W = simhash_matrix(cfg.seed, d, K, L);
  s.index = build_index(s.p.K, s.W, cfg);
  return s;
}

TEST(Hybrid, ConfigValidationNamesTheField) {
  auto expect_bad = [](HybridConfig c, const char *what) {
    try {
      c.validate();
      ADD_FAILURE() << "accepted " << what;
    } catch (const std::invalid_argument &e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  HybridConfig c;
  c.validate();
  for (double b : {0.0, -0.1, 1.5, nan}) {
    HybridConfig x = c;
    x.budget = b;
    expect_bad(x, "budget");
  }
  for (double h : {-0.1, 1.1, nan}) {
    HybridConfig x = c;
    x.head_share = h;
    expect_bad(x, "head share");
  }
  for (double f : {0.0, 1.5, nan}) {
    HybridConfig x = c;
    x.floor = f;
    expect_bad(x, "floor");
  }
  HybridConfig e = c;
  e.epsilon = -1;
  expect_bad(e, "epsilon");
  e.epsilon = std::numeric_limits<double>::infinity();
  expect_bad(e, "epsilon");
  HybridConfig dl = c;
  dl.delta = 1;
  expect_bad(dl, "delta");
  HybridConfig cap = c;
  cap.max_budget = 0;
  expect_bad(cap, "cap");
  for (int r : {0, -1, 4097}) {
    HybridConfig x = c;
    x.reuse = r;
    expect_bad(x, "reuse");
  }
  EXPECT_EQ(c.str(), "b=5% head=0.25 floor=0.1 hamming");
  HybridConfig reused = c;
  reused.reuse = 8;
  EXPECT_EQ(reused.str(), "b=5% head=0.25 floor=0.1 hamming reuse=8");
  EXPECT_THROW(HybridConfig::parse("reuse=0"), std::invalid_argument);
  EXPECT_THROW(HybridConfig::parse("reuse=2.5"), std::invalid_argument);
  for (double x : {-1.0, nan, std::numeric_limits<double>::infinity()}) {
    HybridConfig cut = c;
    cut.cut = x;
    expect_bad(cut, "cut");
  }
  EXPECT_EQ(HybridConfig::parse("cut=4").str(), "b=5% head=0.25 floor=0.1 hamming cut=4");
  EXPECT_THROW(HybridConfig::parse("cut=-1"), std::invalid_argument);
}

// pi_i = min(1, lambda r_i) with sum pi = B: checked against its definition, with the cap at 1
// reached (one dominant score) and not reached, and every pi > 0 (the floor).
TEST(Hybrid, InclusionProbabilitiesSumToTheBudgetWithAFloor) {
  Rng rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    const std::size_t n = 1 + rng.below(300);
    std::vector<double> score(n);
    for (double &x : score)
      x = 4.0 * rng.gaussian();
    if (trial % 3 == 0)
      score[rng.below(n)] = 1e3; // dominant: capped at 1
    if (trial % 5 == 0)
      score[rng.below(n)] = std::numeric_limits<double>::quiet_NaN(); // counts as -inf
    const double B = 0.5 + double(rng.below(n * 2)) / 4.0;
    const double floor = 0.05 + 0.9 * rng.uniform();
    const std::vector<double> pi = inclusion_probabilities(score, B, floor);
    ASSERT_EQ(pi.size(), n);
    double sum = 0;
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_GT(pi[i], 0.0);
      EXPECT_LE(pi[i], 1.0);
      // the floor: at least lambda floor / n, and lambda >= B (the r sum to 1)
      EXPECT_GE(pi[i], std::min(1.0, std::min(B, double(n)) * floor / double(n)) * (1 - 1e-12));
      sum += pi[i];
    }
    EXPECT_NEAR(sum, std::min(B, double(n)), 1e-9 * B) << "n=" << n << " B=" << B;
    // monotone in the score
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j)
        if (score[i] > score[j] && !std::isnan(score[j])) {
          EXPECT_GE(pi[i], pi[j]);
        }
  }
  EXPECT_EQ(inclusion_probabilities(std::vector<double>(4, 1.0), 9, 0.1),
            std::vector<double>(4, 1.0));
  EXPECT_TRUE(inclusion_probabilities({}, 3, 0.1).empty());
  EXPECT_THROW(inclusion_probabilities(std::vector<double>(4, 1.0), 1, 0), std::invalid_argument);
}

// The split form (what a kernel with `cand` calls: the unscored tokens as a count) gives the
// dense form's doubles, -inf and NaN scores sharing pi_unscored, and the budget in total.
TEST(Hybrid, SplitInclusionProbabilitiesMatchTheDenseForm) {
  Rng rng(8);
  const double inf = std::numeric_limits<double>::infinity();
  for (int trial = 0; trial < 20; ++trial) {
    const std::size_t n = 1 + rng.below(400);
    std::vector<double> score(n), scored;
    std::size_t unscored = 0;
    for (double &x : score) {
      x = rng.below(3) == 0 ? (rng.below(2) ? -inf : std::numeric_limits<double>::quiet_NaN())
                            : 3.0 * rng.gaussian();
      if (std::isnan(x) || x == -inf)
        ++unscored;
      else
        scored.push_back(x);
    }
    if (trial == 0) { // nothing scored: uniform
      std::fill(score.begin(), score.end(), -inf);
      scored.clear();
      unscored = n;
    }
    const double B = 0.5 + double(rng.below(n)) / 3.0, floor = 0.05 + 0.9 * rng.uniform();
    const std::vector<double> dense = inclusion_probabilities(score, B, floor);
    const SplitInclusion split = inclusion_probabilities(scored, unscored, B, floor);
    ASSERT_EQ(split.pi.size(), scored.size());
    double sum = 0;
    for (std::size_t i = 0, j = 0; i < n; ++i) {
      const bool s = !std::isnan(score[i]) && score[i] != -inf;
      EXPECT_EQ(dense[i], s ? split.pi[j++] : split.pi_unscored) << "trial " << trial;
      sum += dense[i];
    }
    EXPECT_NEAR(sum, std::min(B, double(n)), 1e-9 * B);
    if (unscored > 0) {
      EXPECT_GT(split.pi_unscored, 0.0); // the floor: an unscored token can be drawn
    }
  }
}

// hybrid_skip_draw is a Bernoulli(p) process. R draws of n positions at p = 0.03: each position's
// frequency has sd sqrt(p (1 - p) / R) = 0.0038, allowed 5 sd (P < 6e-7 each, < 6e-4 for all
// 1000); the drawn count per draw has mean p n = 30 and sd sqrt(n p (1 - p)) / sqrt R = 0.12,
// allowed 5 sd; neighbours are independent: pairs (i, i + 1) both drawn, R (n - 1) p^2 = 1798
// expected, sd below sqrt(2 * 1798) = 60 (a sum of R independent draws, each of 999 weakly
// correlated pair indicators), allowed 5 sd.
TEST(Hybrid, TheSkipDrawIsABernoulliProcess) {
  const std::size_t n = 1000, R = 2000;
  const double p = 0.03;
  std::vector<double> freq(n, 0.0);
  double count = 0, pairs = 0;
  for (std::size_t r = 0; r < R; ++r) {
    const std::vector<std::size_t> d = hybrid_skip_draw(1000 + r, n, p);
    ASSERT_TRUE(std::is_sorted(d.begin(), d.end()));
    ASSERT_TRUE(std::adjacent_find(d.begin(), d.end()) == d.end()); // strictly ascending
    for (std::size_t j = 0; j < d.size(); ++j) {
      ASSERT_LT(d[j], n);
      freq[d[j]] += 1.0 / double(R);
      pairs += j + 1 < d.size() && d[j + 1] == d[j] + 1;
    }
    count += double(d.size()) / double(R);
  }
  const double sd = std::sqrt(p * (1 - p) / double(R));
  for (std::size_t i = 0; i < n; ++i)
    EXPECT_NEAR(freq[i], p, 5 * sd) << "position " << i;
  EXPECT_NEAR(count, p * double(n), 5 * std::sqrt(double(n) * p * (1 - p) / double(R)));
  const double want_pairs = double(R) * double(n - 1) * p * p;
  EXPECT_NEAR(pairs, want_pairs, 5 * std::sqrt(2 * want_pairs));
  // Edges: nothing, everything, no positions; seeded.
  EXPECT_TRUE(hybrid_skip_draw(1, n, 0.0).empty());
  EXPECT_EQ(hybrid_skip_draw(1, 5, 1.0), (std::vector<std::size_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(hybrid_skip_draw(1, 0, 0.5).empty());
  EXPECT_EQ(hybrid_skip_draw(3, n, 0.1), hybrid_skip_draw(3, n, 0.1));
  EXPECT_NE(hybrid_skip_draw(3, n, 0.1), hybrid_skip_draw(4, n, 0.1));
}

// cand = t scores exactly the tokens MagicPIG's retrieval at threshold t returns; the others are
// unscored, reach the tail only through the floor, and the cost stays the budget.
TEST(Hybrid, CandidatesAreWhatRetrievalReturns) {
  for (int t : {1, 2, 3}) {
    const std::size_t n = 1500, d = 32;
    Head s{problem(21, n, d), {}, {}};
    const LshConfig cfg{6, 40, t, 21};
    s.W = simhash_matrix(cfg.seed, d, cfg.K, cfg.L);
    s.index = build_index(s.p.K, s.W, cfg);
    HybridConfig c;
    c.candidates = t;
    c.budget = 0.05;
    const std::vector<double> score = hybrid_scores(s.p.q, s.p.V, s.W, s.index, c);
    std::vector<std::size_t> scored;
    for (std::size_t i = 0; i < score.size(); ++i)
      if (score[i] != -std::numeric_limits<double>::infinity())
        scored.push_back(s.index.split.indexed_begin + i);
    EXPECT_EQ(scored, sample_tokens(s.p.q, s.W, s.index).sample) << "t=" << t;
    EXPECT_GT(scored.size(), 0u);
    EXPECT_LT(scored.size(), score.size());
    c.seed = 5;
    const HybridResult r = hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, c);
    EXPECT_EQ(r.scored, scored.size());
    EXPECT_NEAR(r.cost(), 0.05, 0.025);
    EXPECT_TRUE(std::is_sorted(r.tail.begin(), r.tail.end()));
  }
  HybridConfig c;
  c.candidates = 41; // more than L = 40 tables
  const Head s = setup(2, 200, 16);
  EXPECT_THROW(hybrid_scores(s.p.q, s.p.V, s.W, s.index, c), std::invalid_argument);
  EXPECT_EQ(HybridConfig::parse("cand=2").candidates, 2);
  EXPECT_THROW(HybridConfig::parse("cand=-1"), std::invalid_argument);
  EXPECT_THROW(HybridConfig::parse("cand=1.5"), std::invalid_argument);
}

// spec() is what pig-tune hybrid writes and --hybrid @FILE reads: parse(spec()) must give back
// every field but the budget and the seed, including values with no short decimal form.
TEST(Hybrid, SpecReadsBackToTheSameConfiguration) {
  std::vector<HybridConfig> cs(7);
  cs[5] = HybridConfig::parse("reuse=16:head=0.5");
  cs[6] = HybridConfig::parse("rank=quant:cut=4.5");
  cs[1] = HybridConfig::parse("head=0.1:floor=0.05:bits=512");
  cs[2] = HybridConfig::parse("rank=collisions:vnorm=1:cand=2:head=0.75");
  cs[3] = HybridConfig::parse("eps=0.05:delta=0.1:cap=30%:floor=0.2:pre=0.1:prebits=256:prenorm=1");
  cs[4] = HybridConfig::parse("rank=lowrank:dims=8");
  cs[4].head_share = 1.0 / 3.0; // no short decimal form
  cs[4].floor = 0.1 + 0.2;
  for (HybridConfig c : cs) {
    c.budget = 0.07;
    c.seed = 99;
    const HybridConfig r = HybridConfig::parse(c.spec());
    EXPECT_EQ(r.head_share, c.head_share) << c.spec();
    EXPECT_EQ(r.floor, c.floor) << c.spec();
    EXPECT_EQ(r.epsilon, c.epsilon) << c.spec();
    EXPECT_EQ(r.delta, c.delta) << c.spec();
    EXPECT_EQ(r.max_budget, c.max_budget) << c.spec();
    EXPECT_EQ(r.rank, c.rank) << c.spec();
    EXPECT_EQ(r.value_norm, c.value_norm) << c.spec();
    EXPECT_EQ(r.bits, c.bits) << c.spec();
    EXPECT_EQ(r.dims, c.dims) << c.spec();
    EXPECT_EQ(r.candidates, c.candidates) << c.spec();
    EXPECT_EQ(r.prefilter, c.prefilter) << c.spec();
    EXPECT_EQ(r.prebits, c.prebits) << c.spec();
    EXPECT_EQ(r.prenorm, c.prenorm) << c.spec();
    EXPECT_EQ(r.reuse, c.reuse) << c.spec();
    EXPECT_EQ(r.cut, c.cut) << c.spec();
    EXPECT_EQ(r.budget, HybridConfig{}.budget) << c.spec(); // not written
    EXPECT_EQ(r.seed, HybridConfig{}.seed) << c.spec();
  }
  EXPECT_EQ(HybridConfig{}.spec(), "head=0.25:floor=0.1:rank=hamming");
  EXPECT_EQ(cs[1].spec(), "head=0.1:floor=0.05:rank=hamming:bits=512");
  EXPECT_EQ(cs[5].spec(), "head=0.5:floor=0.1:rank=hamming:reuse=16");
  EXPECT_EQ(cs[6].spec(), "head=0.25:floor=0.1:rank=quant:cut=4.5");
}

// The cascade (pre = p): the first prebits columns score every token coarsely; the best p share
// of them by that score (ties to the lower position) is scored with every column, the others keep
// the coarse score. prenorm=1: the coarse score is step 1's formula over prebits columns (each
// token's norm); the default uses the mean norm, so the coarse score and the cut depend on the
// coarse distance alone. pre = 1 is no cascade.
TEST(Hybrid, CascadeScoresTheCoarseRankersBestWithEveryColumn) {
  const Head s = setup(31, 1200, 32); // K = 6, L = 40: 240 columns
  const std::size_t n = s.index.split.indexed();
  const std::vector<double> all = hybrid_scores(s.p.q, s.p.V, s.W, s.index, HybridConfig{});
  const std::vector<double> c48 =
      hybrid_scores(s.p.q, s.p.V, s.W, s.index, HybridConfig::parse("bits=48"));
  const std::vector<std::uint16_t> qc = encode(s.p.q, s.W, s.index.cfg);
  std::vector<int> H(n);
  for (std::size_t i = 0; i < n; ++i)
    H[i] = hybrid_hamming(48, 6, s.index.codes.data() + i * 40, qc.data());
  for (double pre : {0.05, 0.3}) {
    const std::size_t m = std::size_t(std::llround(pre * double(n)));
    // prenorm=1: the kept set is the top m of c48, and the others keep c48.
    HybridConfig c = HybridConfig::parse("prebits=48:prenorm=1");
    c.prefilter = pre;
    const std::vector<double> score = hybrid_scores(s.p.q, s.p.V, s.W, s.index, c);
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return c48[a] > c48[b]; });
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t i = order[j];
      EXPECT_EQ(score[i], j < m ? all[i] : c48[i]) << "token " << i << " rank " << j;
    }
    // The default: the kept set is the m smallest coarse distances (ties: lower position), and a
    // token below the cut scores by its distance alone.
    c.prenorm = false;
    const std::vector<double> mean = hybrid_scores(s.p.q, s.p.V, s.W, s.index, c);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return H[a] < H[b]; });
    std::map<int, double> by_distance;
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t i = order[j];
      if (j < m) {
        EXPECT_EQ(mean[i], all[i]) << "kept token " << i;
        continue;
      }
      const auto [it, fresh] = by_distance.try_emplace(H[i], mean[i]);
      EXPECT_EQ(mean[i], it->second) << "token " << i << " at distance " << H[i];
      EXPECT_NE(mean[i], all[i]) << "token " << i << " below the cut";
    }
    EXPECT_GT(by_distance.size(), 3u);
  }
  HybridConfig one = HybridConfig::parse("pre=1:prebits=48");
  EXPECT_EQ(hybrid_scores(s.p.q, s.p.V, s.W, s.index, one), all);
  // Refused: prebits above K L, pre outside [0, 1] or with another ranker.
  EXPECT_THROW(hybrid_scores(s.p.q, s.p.V, s.W, s.index, HybridConfig::parse("pre=0.1")),
               std::invalid_argument); // prebits 512 > 240
  EXPECT_THROW(HybridConfig::parse("pre=1.5"), std::invalid_argument);
  EXPECT_THROW(HybridConfig::parse("pre=0.1:rank=collisions"), std::invalid_argument);
  EXPECT_THROW(HybridConfig::parse("prebits=0"), std::invalid_argument);
  EXPECT_THROW(HybridConfig::parse("prenorm=2"), std::invalid_argument);
  EXPECT_EQ(HybridConfig::parse("pre=10%").prefilter, 0.1);
}

// lowrank at full rank is a rotation of the centred keys, so its score is scale q.(k - mu) up to
// the int8 rounding: each of the d components is off by at most s_k / 2 (s_k = max |k'_j| / 127),
// so |l^ - l| <= scale (s_k / 2) sum_j |q'_j|, plus f32 rounding of the rotation (1e-4 relative
// allowed). At dims < d the scores still rank: the top tokens by l^ hold most of the true mass.
TEST(Hybrid, TheLowRankRankerEstimatesTheCentredLogits) {
  const std::size_t n = 600, d = 32;
  const Head s = setup(31, n, d);
  HybridConfig c;
  c.rank = HybridRank::lowrank;
  c.dims = int(d);
  const std::vector<double> score = hybrid_scores(s.p.q, s.p.V, s.W, s.index, c);
  const HybridLowRank low = HybridLowRank::fit(s.index.centered, int(d));
  const std::vector<float> qp = low.transform.query(s.p.q);
  double qsum = 0;
  for (float x : qp)
    qsum += std::fabs(double(x));
  const double scale = 1.0 / std::sqrt(double(d));
  for (std::size_t i = 0; i < score.size(); ++i) {
    const std::size_t tok = s.index.split.indexed_begin + i;
    double exact = 0, knorm = 0;
    const auto k = s.index.centered_key(tok);
    for (std::size_t j = 0; j < d; ++j)
      exact += double(s.p.q[j]) * double(k[j]);
    for (float x : low.transform.key(k))
      knorm = std::max(knorm, std::fabs(double(x)));
    const double bound = scale * (knorm / 127.0 / 2.0) * qsum;
    EXPECT_NEAR(score[i], scale * exact, bound * (1 + 1e-4) + 1e-4 * std::fabs(scale * exact))
        << "token " << tok;
  }
  // dims = 4 of 32: a coarser sketch that still finds the mass (the exact top 5 % of tokens by
  // q.k carry a share of the softmax that the lowrank top 5 % recovers for the most part).
  c.dims = 4;
  const std::vector<double> coarse = hybrid_scores(s.p.q, s.p.V, s.W, s.index, c);
  std::vector<double> exact(score.size());
  for (std::size_t i = 0; i < exact.size(); ++i) {
    const auto k = s.index.centered_key(s.index.split.indexed_begin + i);
    for (std::size_t j = 0; j < d; ++j)
      exact[i] += scale * double(s.p.q[j]) * double(k[j]);
  }
  auto mass_of_top = [&](const std::vector<double> &by) {
    std::vector<std::size_t> o(by.size());
    std::iota(o.begin(), o.end(), std::size_t(0));
    const std::size_t m = by.size() / 20;
    std::partial_sort(o.begin(), o.begin() + std::ptrdiff_t(m), o.end(),
                      [&](std::size_t a, std::size_t b) { return by[a] > by[b]; });
    const double top = *std::max_element(exact.begin(), exact.end());
    double in = 0, all = 0;
    for (double x : exact)
      all += std::exp(x - top);
    for (std::size_t j = 0; j < m; ++j)
      in += std::exp(exact[o[j]] - top);
    return in / all;
  };
  const double ideal = mass_of_top(exact), found = mass_of_top(coarse);
  EXPECT_GT(found, 0.5 * ideal) << "ideal " << ideal << " found " << found;
  // Validation: dims above d, and the options' spelling.
  c.dims = int(d) + 1;
  EXPECT_THROW(hybrid_scores(s.p.q, s.p.V, s.W, s.index, c), std::invalid_argument);
  const HybridConfig parsed = HybridConfig::parse("rank=lowrank:dims=8");
  EXPECT_EQ(parsed.rank, HybridRank::lowrank);
  EXPECT_EQ(parsed.dims, 8);
  EXPECT_NE(parsed.str().find("lowrank dims=8"), std::string::npos);
  EXPECT_THROW(HybridConfig::parse("rank=lowrank:dims=0"), std::invalid_argument);
}

// quant: the centred key rounded to int4 (k = s_k x + e_k, |e_k,j| <= s_k / 2, s_k = max |k_j| / 7)
// and the query to int8 (q = s_q y + e_q, |e_q,j| <= s_q / 2, s_q = max |q_j| / 127). Then
// q.k - s_q s_k y.x = q.e_k + e_q.(s_k x), so |l^ - l| <= scale (s_k / 2 sum_j |q_j| + s_q / 2
// (sum_j |k_j| + d s_k / 2)). kbits=8 rounds the key to [-127, 127] instead: a tighter bound.
TEST(Hybrid, TheQuantRankerEstimatesTheCentredLogits) {
  const std::size_t n = 600, d = 32;
  const Head s = setup(37, n, d);
  const double scale = 1.0 / std::sqrt(double(d));
  double qsum = 0, qmax = 0;
  for (float x : s.p.q) {
    qsum += std::fabs(double(x));
    qmax = std::max(qmax, std::fabs(double(x)));
  }
  for (int kbits : {4, 8}) {
    HybridConfig c;
    c.rank = HybridRank::quant;
    c.kbits = kbits;
    const std::vector<double> score = hybrid_scores(s.p.q, s.p.V, s.W, s.index, c);
    double worst = 0;
    for (std::size_t i = 0; i < score.size(); ++i) {
      const auto k = s.index.centered_key(s.index.split.indexed_begin + i);
      double exact = 0, ksum = 0, kmax = 0;
      for (std::size_t j = 0; j < d; ++j) {
        exact += double(s.p.q[j]) * double(k[j]);
        ksum += std::fabs(double(k[j]));
        kmax = std::max(kmax, std::fabs(double(k[j])));
      }
      const double sk = kmax / (kbits == 4 ? 7.0 : 127.0), sq = qmax / 127.0;
      const double bound = scale * (sk / 2 * qsum + sq / 2 * (ksum + double(d) * sk / 2));
      EXPECT_NEAR(score[i], scale * exact, bound * (1 + 1e-6)) << "kbits " << kbits << " " << i;
      worst = std::max(worst, std::fabs(score[i] - scale * exact) / bound);
    }
    EXPECT_GT(worst, 0.05) << "the bound is not vacuous";
  }
  EXPECT_EQ(HybridConfig::parse("rank=quant").str(), "b=5% head=0.25 floor=0.1 quant");
  EXPECT_EQ(HybridConfig::parse("rank=quant").effective_kbits(), 4);
  EXPECT_EQ(HybridConfig::parse("rank=lowrank").effective_kbits(), 8);
  EXPECT_EQ(HybridConfig::parse("rank=quant:kbits=8").spec(),
            "head=0.25:floor=0.1:rank=quant:kbits=8");
  EXPECT_THROW(HybridConfig::parse("kbits=4"), std::invalid_argument); // hamming
  EXPECT_THROW(HybridConfig::parse("rank=quant:kbits=5"), std::invalid_argument);
}

// The head is exact: with head_share 1 there is no tail and the output is one softmax over the
// static tokens and the head; with budget 1 as well it is dense attention.
TEST(Hybrid, TheExactHeadIsExact) {
  const Head s = setup(5);
  HybridConfig c;
  c.head_share = 1;
  c.budget = 0.1;
  const HybridResult r = hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, c);
  EXPECT_TRUE(r.tail.empty());
  EXPECT_EQ(r.head.size(), std::size_t(std::llround(0.1 * double(s.index.split.indexed()))));
  std::vector<std::size_t> ids = s.index.split.static_ids();
  ids.insert(ids.end(), r.head.begin(), r.head.end());
  const Attention want = attention_over(s.p.q, s.p.K, s.p.V, ids, {});
  EXPECT_EQ(r.attention.out, want.out);
  EXPECT_EQ(r.attention.lse, want.lse);
  // The head is the best-ranked part.
  const std::vector<double> score = hybrid_scores(s.p.q, s.p.V, s.W, s.index, c);
  double worst_in = std::numeric_limits<double>::infinity(), best_out = -worst_in;
  const std::set<std::size_t> in(r.head.begin(), r.head.end());
  for (std::size_t i = 0; i < score.size(); ++i) {
    if (in.count(s.index.split.indexed_begin + i))
      worst_in = std::min(worst_in, score[i]);
    else
      best_out = std::max(best_out, score[i]);
  }
  EXPECT_GE(worst_in, best_out);
  c.budget = 1;
  const HybridResult all = hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, c);
  const Attention dense = dense_attention(s.p.q, s.p.K, s.p.V);
  EXPECT_LT(relative_l2_error(all.attention.out, dense.out), 1e-6);
  EXPECT_NEAR(all.attention.lse, dense.lse, 1e-9);
  EXPECT_DOUBLE_EQ(all.cost(), 1.0);
}

// Horvitz-Thompson over the draw of U with W, the query and so pi fixed: tail token i is in S
// with probability exactly pi_i, so E[sum_S e^{z_i}/pi_i] = sum_tail e^{z_i}. Then
// exp(lse - lse_dense) has mean 1 and exp(lse - lse_dense) o mean o_dense. Each is a sum of
// independent terms, so over R seeds the sample mean is within z standard errors (sample sd /
// sqrt R) with probability 2 Phi(-z); z = 5 gives 6e-7 per coordinate. Checked for both rankers,
// with |v|, and with a useless hash (K = 1, L = 1: the "whatever the hash does" of the claim).
TEST(Hybrid, NumeratorAndPartitionFunctionAreUnbiasedOverTheDraw) {
  struct Case {
    int K, L;
    HybridRank rank;
    bool vnorm;
    int cand;       // > 0: the unscored tokens are drawn by skips (hybrid_skip_draw)
    double pre = 0; // > 0: the cascade, 64 coarse bits (the rest unscored, drawn by skips)
    double cut = 0; // > 0: the tail below its best - cut unscored, drawn by skips
  };
  for (const Case cs :
       {Case{6, 40, HybridRank::collisions, false, 0}, Case{6, 40, HybridRank::hamming, true, 0},
        Case{1, 1, HybridRank::collisions, false, 0}, Case{6, 40, HybridRank::hamming, false, 2},
        Case{6, 40, HybridRank::lowrank, false, 0}, Case{6, 40, HybridRank::quant, true, 0},
        Case{6, 40, HybridRank::hamming, false, 0, 0.2},
        Case{6, 40, HybridRank::quant, false, 0, 0, 0.5}}) {
    const std::size_t n = 400, d = 16, R = 1500;
    const Head s = setup(11, n, d, cs.K, cs.L);
    const Attention exact = dense_attention(s.p.q, s.p.K, s.p.V);
    const double drawn = testing::expect_unbiased(
        exact, R,
        [&](std::size_t r) {
          HybridConfig c;
          c.budget = 0.08;
          c.head_share = 0.25;
          c.rank = cs.rank;
          c.value_norm = cs.vnorm;
          c.candidates = cs.cand;
          c.prefilter = cs.pre;
          c.prebits = 64;
          c.cut = cs.cut;
          c.seed = 77 + r;
          return hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, c);
        },
        [](const HybridResult &e) { return e.tail.size(); },
        "K=" + std::to_string(cs.K) + " L=" + std::to_string(cs.L) +
            " cand=" + std::to_string(cs.cand) + " pre=" + std::to_string(cs.pre) +
            " cut=" + std::to_string(cs.cut));
    // The tail's expected size is its budget (0.08 * 332 * 0.75 = 19.9): the draw has teeth.
    EXPECT_NEAR(drawn, 0.08 * 332 * 0.75, 1.5);
  }
}

// The cut leaves exactly the tail tokens scoring below the tail's best - cut to the floor: their
// count is cut_off, the head is the same as without a cut, and a cut wider than every gap changes
// nothing (the same doubles).
TEST(Hybrid, TheCutLeavesTheTailBelowItToTheFloor) {
  const Head s = setup(23, 500, 16);
  HybridConfig c;
  c.budget = 0.1;
  c.rank = HybridRank::quant;
  c.seed = 9;
  const HybridResult plain = hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, c);
  const std::vector<double> score = hybrid_scores(s.p.q, s.p.V, s.W, s.index, c);
  const std::size_t begin = s.index.split.indexed_begin;
  std::vector<bool> in_head(score.size(), false);
  for (std::size_t i : plain.head)
    in_head[i - begin] = true;
  double best = -std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < score.size(); ++i)
    if (!in_head[i])
      best = std::max(best, score[i]);
  for (double cut : {0.25, 1.0, 3.0}) {
    HybridConfig cc = c;
    cc.cut = cut;
    const HybridResult r = hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, cc);
    std::size_t below = 0;
    for (std::size_t i = 0; i < score.size(); ++i)
      below += !in_head[i] && score[i] < best - cut;
    EXPECT_GT(below, 0u) << cut;
    EXPECT_EQ(r.cut_off, below) << cut;
    EXPECT_EQ(r.head, plain.head) << cut;
    // A drawn token below the cut has the floor's pi, the smallest of all.
    const double pi_min = *std::min_element(r.pi.begin(), r.pi.end());
    for (std::size_t j = 0; j < r.tail.size(); ++j)
      if (score[r.tail[j] - begin] < best - cut) {
        EXPECT_EQ(r.pi[j], pi_min) << cut;
      }
  }
  HybridConfig wide = c;
  wide.cut = 1e9;
  const HybridResult w = hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, wide);
  EXPECT_EQ(w.cut_off, 0u);
  EXPECT_EQ(w.tail, plain.tail);
  EXPECT_EQ(w.pi, plain.pi);
  EXPECT_EQ(w.attention.out, plain.attention.out);
}

// A selection reused (reuse > 1) at the step it was made, over the same tokens, is that step's
// estimate: the same tokens, biases and order, so the same doubles.
TEST(Hybrid, AReusedSelectionAtItsOwnStepIsTheEstimate) {
  const Head s = setup(21, 600, 16);
  HybridConfig c;
  c.budget = 0.1;
  c.seed = 5;
  const HybridResult r = hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, c);
  ASSERT_FALSE(r.tail.empty());
  const Attention a =
      hybrid_reuse(s.p.q, s.p.K, s.p.V, r, s.index.split.indexed_begin, s.index.split.indexed_end);
  EXPECT_EQ(a.out, r.attention.out);
  EXPECT_EQ(a.lse, r.attention.lse);
}

// A selection made for an earlier query q0 over the first n0 tokens, attended by a later query q1
// over n > n0 tokens: the tokens from the old indexed end on are exact and pi did not depend on
// this draw, so the numerator and the partition function for q1 stay unbiased over the draw (the
// bound of NumeratorAndPartitionFunctionAreUnbiasedOverTheDraw: 5 standard errors of the mean of
// R = 1500 seeds). q1 is unrelated to q0, the worst case for the proposal, not for the mean.
TEST(Hybrid, AReusedSelectionStaysUnbiasedForALaterQuery) {
  const std::size_t n = 400, n0 = 380, d = 16, R = 1500;
  const Head s = setup(13, n, d);
  const Matrix K0{s.p.K.row(0), n0, d}, V0{s.p.V.row(0), n0, d};
  const LshIndex index0 = build_index(K0, s.W, s.index.cfg);
  Rng rng(99);
  const std::vector<float> q1 = gaussian_vector(rng, d, 2.0);
  const Attention exact = dense_attention(q1, s.p.K, s.p.V);
  struct Reused {
    Attention attention;
    std::size_t tail = 0;
  };
  const double drawn = testing::expect_unbiased(
      exact, R,
      [&](std::size_t r) {
        HybridConfig c;
        c.budget = 0.08;
        c.seed = 1000 + r;
        const HybridResult sel = hybrid_attention(s.p.q, K0, V0, s.W, index0, c);
        return Reused{hybrid_reuse(q1, s.p.K, s.p.V, sel, index0.split.indexed_begin,
                                   index0.split.indexed_end),
                      sel.tail.size()};
      },
      [](const Reused &e) { return e.tail; }, "reused");
  // The old tail's budget: 0.08 * (380 - 68) * 0.75 = 18.7 tokens.
  EXPECT_NEAR(drawn, 0.08 * 312 * 0.75, 1.5);
}

TEST(Hybrid, ReuseRefusesASelectionOutsideItsIndexedPart) {
  const Head s = setup(3, 300, 16);
  HybridConfig c;
  c.budget = 0.1;
  const HybridResult r = hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, c);
  const std::size_t b = s.index.split.indexed_begin, e = s.index.split.indexed_end;
  // The selection reaches past an indexed end placed before its last token.
  EXPECT_THROW(hybrid_reuse(s.p.q, s.p.K, s.p.V, r, b, b + 1), std::invalid_argument);
  EXPECT_THROW(hybrid_reuse(s.p.q, s.p.K, s.p.V, r, b, 301), std::invalid_argument);
  EXPECT_THROW(hybrid_reuse(s.p.q, s.p.K, s.p.V, r, e + 1, e), std::invalid_argument);
  HybridResult bad = r;
  bad.pi.pop_back();
  EXPECT_THROW(hybrid_reuse(s.p.q, s.p.K, s.p.V, bad, b, e), std::invalid_argument);
}

// The mean error over queries falls as the budget grows (synthetic heads, several seeds).
TEST(Hybrid, ErrorFallsWithTheBudget) {
  std::vector<double> mean(3, 0.0);
  const double budgets[] = {0.02, 0.08, 0.32};
  for (std::uint64_t seed = 0; seed < 12; ++seed) {
    const Head s = setup(100 + seed);
    const Attention exact = dense_attention(s.p.q, s.p.K, s.p.V);
    for (int b = 0; b < 3; ++b) {
      HybridConfig c;
      c.budget = budgets[b];
      c.seed = seed;
      const HybridResult r = hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, c);
      EXPECT_NEAR(r.cost(), budgets[b], 0.5 * budgets[b]);
      mean[size_t(b)] += relative_l2_error(r.attention.out, exact.out) / 12;
    }
  }
  EXPECT_LT(mean[1], mean[0]);
  EXPECT_LT(mean[2], mean[1]);
}

TEST(Hybrid, TheDrawIsSeededAndNested) {
  const Head s = setup(7);
  HybridConfig c;
  c.head_share = 0; // the same (empty) head at every budget
  c.budget = 0.03;
  const HybridResult a = hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, c);
  const HybridResult again = hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, c);
  EXPECT_EQ(a.tail, again.tail);
  EXPECT_EQ(a.attention.out, again.attention.out);
  c.budget = 0.12;
  const HybridResult big = hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, c);
  EXPECT_GT(big.tail.size(), a.tail.size());
  EXPECT_TRUE(std::includes(big.tail.begin(), big.tail.end(), a.tail.begin(), a.tail.end()));
  c.budget = 0.03;
  c.seed ^= 1;
  EXPECT_NE(hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, c).tail, a.tail);
  EXPECT_NE(hybrid_uniform(1, 5), hybrid_uniform(2, 5));
  EXPECT_NE(hybrid_uniform(1, 5), hybrid_uniform(1, 6));
}

// epsilon > 0: the tail grows until the estimated error is below epsilon or the cap is reached;
// a loose epsilon keeps the starting budget. The estimate is calibrated in the sense of the
// central-limit rule: over seeds, the true error exceeds epsilon in at most delta of the runs
// that stopped below it, plus sampling slack (binomial sd of 200 runs at 0.1: 0.021; allowed 0.1).
TEST(Hybrid, TheCentralLimitBudgetGrowsTheTailUntilTheBoundHolds) {
  const Head s = setup(9);
  const Attention exact = dense_attention(s.p.q, s.p.K, s.p.V);
  HybridConfig c;
  c.budget = 0.02;
  c.head_share = 0.5;
  c.epsilon = 10;
  const HybridResult loose = hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, c);
  EXPECT_NEAR(loose.tail_budget, 0.01 * double(s.index.split.indexed()), 1.0);
  c.epsilon = 1e-9;
  c.max_budget = 0.3;
  const HybridResult capped = hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, c);
  EXPECT_NEAR(capped.tail_budget + double(capped.head.size()),
              0.3 * double(s.index.split.indexed()), 1.0);
  c.epsilon = 0.12;
  c.delta = 0.1;
  c.max_budget = 0.5;
  int stopped = 0, over = 0;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    c.seed = seed;
    const HybridResult r = hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, c);
    if (r.estimated_error <= c.epsilon) {
      ++stopped;
      over += relative_l2_error(r.attention.out, exact.out) > c.epsilon;
    }
  }
  ASSERT_GT(stopped, 100);
  EXPECT_LE(double(over) / stopped, c.delta + 0.1) << over << " of " << stopped;
}

TEST(Hybrid, AdversarialInputs) {
  // The rankers that read less face the same inputs as the default.
  const std::vector<HybridConfig> rankers = {
      HybridConfig{}, HybridConfig::parse("cand=1"), HybridConfig::parse("rank=lowrank:dims=4"),
      HybridConfig::parse("pre=0.1:prebits=60"), HybridConfig::parse("rank=quant")};
  // Fewer tokens than the static window: nothing indexed, exactly dense.
  for (const HybridConfig &c : rankers)
    for (std::size_t n : {1, 5, 68}) {
      const Head s = setup(13, n, 16);
      const HybridResult r = hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, c);
      const Attention dense = dense_attention(s.p.q, s.p.K, s.p.V);
      EXPECT_LT(relative_l2_error(r.attention.out, dense.out), 1e-6) << n << " " << c.str();
      EXPECT_EQ(r.cost(), 0.0);
    }
  // A NaN key: lowrank leaves non-finite keys unscored (-inf) instead of ranking NaN.
  {
    Head s = setup(19, 400, 16);
    s.p.K.at(200, 5) = std::numeric_limits<float>::quiet_NaN();
    s.index = build_index(s.p.K, s.W, s.index.cfg);
    HybridConfig c = HybridConfig::parse("rank=lowrank:dims=4");
    // the NaN reaches the mean and so every centred key: all unscored, the floor alone, no crash
    const std::vector<double> score = hybrid_scores(s.p.q, s.p.V, s.W, s.index, c);
    for (double x : score)
      EXPECT_EQ(x, -std::numeric_limits<double>::infinity());
    const HybridResult r = hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, c);
    EXPECT_EQ(r.attention.out.size(), 16u);
  }
  // One indexed token.
  {
    const Head s = setup(14, 69, 16);
    const HybridResult r = hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, HybridConfig{});
    EXPECT_LE(r.head.size() + r.tail.size(), 1u);
  }
  // All keys and values equal: every estimate is the value, whatever was drawn.
  {
    Rng rng(15);
    const std::size_t n = 500, d = 16;
    const std::vector<float> k = gaussian_vector(rng, d), v = gaussian_vector(rng, d);
    OwnedMatrix K(n, d), V(n, d);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < d; ++j) {
        K.at(i, j) = k[j];
        V.at(i, j) = v[j];
      }
    const std::vector<float> q = gaussian_vector(rng, d);
    const LshConfig cfg{5, 20, 2, 3};
    const OwnedMatrix W = simhash_matrix(3, d, 5, 20);
    const LshIndex index = build_index(K, W, cfg);
    for (const HybridConfig &c : rankers) {
      const HybridResult r = hybrid_attention(q, K, V, W, index, c);
      EXPECT_LT(relative_l2_error(r.attention.out, v), 1e-6) << c.str();
    }
  }
  // Huge norms: finite probabilities, no throw; the head still holds the best tokens.
  {
    Head s = setup(16, 600, 16);
    for (float &x : s.p.K.data)
      x *= 1e15f;
    s.index = build_index(s.p.K, s.W, s.index.cfg);
    for (const HybridConfig &c : rankers) {
      const HybridResult r = hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, c);
      for (double p : r.pi)
        EXPECT_TRUE(p > 0 && p <= 1) << c.str();
    }
  }
  // NaN in the query: NaN out, no crash, no throw.
  {
    Head s = setup(17, 600, 16);
    s.p.q[3] = std::numeric_limits<float>::quiet_NaN();
    const HybridResult r = hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, HybridConfig{});
    EXPECT_TRUE(std::isnan(r.attention.out[0]));
  }
  // Mismatched inputs throw.
  {
    const Head s = setup(18, 600, 16);
    const Head other = setup(18, 700, 16);
    EXPECT_THROW(hybrid_attention(s.p.q, other.p.K, other.p.V, s.W, s.index, HybridConfig{}),
                 std::invalid_argument);
    HybridConfig bad;
    bad.budget = 2;
    EXPECT_THROW(hybrid_attention(s.p.q, s.p.K, s.p.V, s.W, s.index, bad), std::invalid_argument);
  }
}

} // namespace
} // namespace pig::ref
