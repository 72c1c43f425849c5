#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "pig/reference/attention.h"
#include "pig/reference/lsh.h"
#include "pig/reference/magicpig.h"
#include "pig/reference/random.h"
#include "pig/tune/quality.h"

namespace pig::tune {
namespace {

using ref::Matrix;
using ref::OwnedMatrix;

// The error agrees with ref's to rounding only: log u's binomial tail is summed by a series
// (quality.cpp), about 1e-13 off ref's term-by-term sum in log u, which moves the output by
// ~1e-13 relative before it is rounded to float. The rounding to float can then flip the last
// bit of an output coordinate, which moves the error by up to 2^-24 |o_j| / |o|; `abs` covers
// that (errors near 0, e.g. a sample of every token, would fail any purely relative test).
constexpr double kRel = 1e-9;
constexpr double kAbs = 1e-7;

OwnedMatrix Gaussian(ref::Rng &rng, std::size_t rows, std::size_t cols, double sigma,
                     const std::vector<double> &offset = {}) {
  OwnedMatrix m(rows, cols);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j)
      m.at(i, j) = float(sigma * rng.gaussian() + (offset.empty() ? 0.0 : offset[j]));
  return m;
}

std::vector<float> GaussianVector(ref::Rng &rng, std::size_t d, double sigma) {
  std::vector<float> v(d);
  for (float &x : v)
    x = float(sigma * rng.gaussian());
  return v;
}

// The reference path, one configuration at a time: what pig-eval did before MeasureCandidates.
std::vector<std::vector<QualitySample>> Reference(Matrix K, Matrix V, Matrix W,
                                                  const std::vector<QualityQuery> &queries,
                                                  const std::vector<LshPoint> &candidates,
                                                  ref::StaticConfig st) {
  std::vector<std::vector<QualitySample>> out(candidates.size());
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    const ref::LshConfig cfg{candidates[c].K, candidates[c].L, candidates[c].t, 7};
    std::map<std::size_t, ref::LshIndex> indexes; // one per prefix length
    for (const QualityQuery &q : queries) {
      const std::size_t m = q.length == 0 ? K.rows : q.length;
      const Matrix Kp{K.data, m, K.cols}, Vp{V.data, m, V.cols};
      if (!indexes.count(m))
        indexes.emplace(m, ref::build_index(Kp, W, cfg, st));
      const ref::MagicPigResult r = ref::magicpig_attention(q.q, Kp, Vp, W, indexes.at(m));
      const ref::Attention exact = ref::dense_attention(q.q, Kp, Vp);
      out[c].push_back({ref::relative_l2_error(r.attention.out, exact.out), r.cost()});
    }
  }
  return out;
}

// Every cost exactly (the sample sets must be identical), every error to rounding.
void ExpectMatches(Matrix K, Matrix V, Matrix W, const std::vector<QualityQuery> &queries,
                   const std::vector<LshPoint> &candidates, ref::StaticConfig st = {},
                   std::size_t min_indexed = 16) {
  const auto got = MeasureCandidates(K, V, W, queries, candidates, st, min_indexed);
  const auto want = Reference(K, V, W, queries, candidates, st);
  ASSERT_EQ(got.size(), candidates.size());
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    ASSERT_EQ(got[c].size(), queries.size());
    for (std::size_t i = 0; i < queries.size(); ++i) {
      SCOPED_TRACE("candidate K=" + std::to_string(candidates[c].K) +
                   " L=" + std::to_string(candidates[c].L) +
                   " t=" + std::to_string(candidates[c].t) + ", query " + std::to_string(i));
      EXPECT_EQ(got[c][i].cost, want[c][i].cost);
      EXPECT_NEAR(got[c][i].error, want[c][i].error, kRel * want[c][i].error + kAbs);
    }
  }
}

const std::vector<LshPoint> kSpread = {
    {1, 1, 1},    {1, 300, 3}, {2, 7, 2},    {3, 50, 1},   {4, 150, 2}, {5, 64, 3},
    {6, 32, 1},   {6, 300, 3}, {7, 10, 3},   {8, 75, 2},   {9, 120, 2}, {10, 150, 2},
    {11, 256, 1}, {12, 1, 1},  {12, 300, 3}, {12, 300, 1}, {3, 2, 2},
};

// Keys in a cone (a shared offset), queries on the opposite side, as in real models: centering
// matters and the sample sizes span nearly nothing to nearly everything.
TEST(Quality, MatchesReferenceOnRandomData) {
  ref::Rng rng(11);
  const std::size_t n = 300, d = 16, dv = 12;
  std::vector<double> offset(d);
  for (double &x : offset)
    x = 1.5 * rng.gaussian();
  const OwnedMatrix K = Gaussian(rng, n, d, 1.0, offset), V = Gaussian(rng, n, dv, 1.0);
  const OwnedMatrix W = ref::simhash_matrix(7, d, 12, 300);
  std::vector<QualityQuery> queries;
  // Lengths: all rows; just above sink + local + 16; a prefix (not every row visible).
  for (std::size_t length : {std::size_t{0}, std::size_t{4 + 64 + 17}, std::size_t{211}})
    for (int head = 0; head < 2; ++head) {
      std::vector<float> q = GaussianVector(rng, d, 1.0);
      for (std::size_t j = 0; j < d; ++j)
        q[j] -= float(0.5 * offset[j]);
      queries.push_back({q, length});
    }
  ExpectMatches(K, V, W, queries, kSpread);
}

TEST(Quality, MatchesReferenceWithOtherStaticWindows) {
  ref::Rng rng(12);
  const std::size_t n = 160, d = 8;
  const OwnedMatrix K = Gaussian(rng, n, d, 2.0), V = Gaussian(rng, n, d, 1.0);
  const OwnedMatrix W = ref::simhash_matrix(3, d, 10, 64);
  const std::vector<LshPoint> cands = {{2, 16, 1}, {4, 64, 2}, {10, 64, 3}, {6, 8, 1}};
  const std::vector<QualityQuery> queries = {{GaussianVector(rng, d, 1.0), 0},
                                             {GaussianVector(rng, d, 3.0), 100}};
  ExpectMatches(K, V, W, queries, cands, ref::StaticConfig{0, 0});
  ExpectMatches(K, V, W, queries, cands, ref::StaticConfig{10, 5});
  ExpectMatches(K, V, W, queries, cands, ref::StaticConfig{1, 90}, 1);
}

// n where the static window covers almost everything: exactly min_indexed tokens indexed; and
// none at all (min_indexed 0), where MagicPIG is exactly dense attention.
TEST(Quality, StaticWindowCoversAlmostEverything) {
  ref::Rng rng(13);
  const std::size_t d = 16;
  const OwnedMatrix K = Gaussian(rng, 4 + 64 + 16, d, 1.0), V = Gaussian(rng, 4 + 64 + 16, d, 1.0);
  const OwnedMatrix W = ref::simhash_matrix(5, d, 12, 300);
  const std::vector<QualityQuery> queries = {{GaussianVector(rng, d, 1.0), 0},
                                             {GaussianVector(rng, d, 1.0), 4 + 64 + 16}};
  ExpectMatches(K, V, W, queries, kSpread);
  const std::vector<QualityQuery> dense = {{GaussianVector(rng, d, 1.0), 60},
                                           {GaussianVector(rng, d, 1.0), 68}};
  const auto r = MeasureCandidates(K, V, W, dense, kSpread, {}, 0);
  for (const auto &row : r)
    for (const QualitySample &s : row) {
      EXPECT_EQ(s.cost, 0.0);
      EXPECT_EQ(s.error, 0.0);
    }
  ExpectMatches(K, V, W, dense, kSpread, {}, 0);
}

TEST(Quality, AdversarialInputs) {
  ref::Rng rng(14);
  const std::size_t n = 200, d = 16;
  const OwnedMatrix W = ref::simhash_matrix(9, d, 12, 300);
  const OwnedMatrix V = Gaussian(rng, n, d, 1.0);
  const std::vector<QualityQuery> zero = {{std::vector<float>(d, 0.0f), 0},
                                          {std::vector<float>(d, 0.0f), 150}};
  {
    SCOPED_TRACE("all keys equal");
    OwnedMatrix K(n, d);
    const std::vector<float> k = GaussianVector(rng, d, 1.0);
    for (std::size_t i = 0; i < n; ++i)
      std::copy(k.begin(), k.end(), K.row(i));
    ExpectMatches(K, V, W, {{GaussianVector(rng, d, 1.0), 0}, {GaussianVector(rng, d, 1.0), 99}},
                  kSpread);
    ExpectMatches(K, V, W, zero, kSpread);
  }
  {
    SCOPED_TRACE("huge norms");
    const OwnedMatrix K = Gaussian(rng, n, d, 1e4);
    ExpectMatches(K, V, W, {{GaussianVector(rng, d, 1e4), 0}, {GaussianVector(rng, d, 1e-3), 120}},
                  kSpread);
  }
  {
    SCOPED_TRACE("one dominant direction");
    std::vector<double> offset(d, 0.0);
    offset[3] = 1e3;
    const OwnedMatrix K = Gaussian(rng, n, d, 1.0, offset);
    ExpectMatches(K, V, W, {{GaussianVector(rng, d, 1.0), 0}, {GaussianVector(rng, d, 1.0), 100}},
                  kSpread);
    ExpectMatches(K, V, W, zero, kSpread);
  }
  {
    // Small integers in K and W: many projections of the centred keys are exactly 0 or within
    // rounding of it, where the fast projection cannot decide the bit and the exact one must.
    SCOPED_TRACE("projections at zero");
    OwnedMatrix K(n, d), Wi(d, 12 * 300);
    for (float &x : K.data)
      x = float(int(rng.below(5)) - 2);
    for (float &x : Wi.data)
      x = float(int(rng.below(3)) - 1);
    std::vector<float> q(d);
    for (float &x : q)
      x = float(int(rng.below(3)) - 1);
    ExpectMatches(K, V, Wi, {{q, 0}, {q, 137}, {GaussianVector(rng, d, 1.0), 0}}, kSpread);
  }
}

TEST(Quality, EmptyListsGiveEmptyShapes) {
  ref::Rng rng(15);
  const OwnedMatrix K = Gaussian(rng, 100, 4, 1.0), V = Gaussian(rng, 100, 4, 1.0);
  const OwnedMatrix W = ref::simhash_matrix(1, 4, 4, 8);
  const std::vector<QualityQuery> queries = {{GaussianVector(rng, 4, 1.0), 0}};
  EXPECT_TRUE(MeasureCandidates(K, V, W, queries, {}).empty());
  const auto r = MeasureCandidates(K, V, W, {}, {{4, 8, 2}, {2, 8, 1}});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_TRUE(r[0].empty() && r[1].empty());
}

TEST(Quality, RejectsBadInputs) {
  ref::Rng rng(16);
  const std::size_t n = 100, d = 4;
  const OwnedMatrix K = Gaussian(rng, n, d, 1.0), V = Gaussian(rng, n, d, 1.0);
  const OwnedMatrix W = ref::simhash_matrix(1, d, 4, 8);
  const std::vector<QualityQuery> ok = {{GaussianVector(rng, d, 1.0), 0}};
  const std::vector<LshPoint> good = {{4, 8, 2}};
  EXPECT_NO_THROW(MeasureCandidates(K, V, W, ok, good));
  auto throws = [&](Matrix k, Matrix v, Matrix w, const std::vector<QualityQuery> &q,
                    const std::vector<LshPoint> &c, std::size_t min_indexed = 16) {
    EXPECT_THROW(MeasureCandidates(k, v, w, q, c, {}, min_indexed), std::invalid_argument);
  };
  throws(Matrix{K.data.data(), n, 0}, V, Matrix{W.data.data(), 0, 32}, {{{}, 0}}, good);
  throws(K, Matrix{V.data.data(), n - 1, d}, W, ok, good);               // V rows
  throws(K, V, Matrix{W.data.data(), d - 1, 32}, ok, good);              // W rows
  throws(K, V, W, {{std::vector<float>(d + 1, 1.0f), 0}}, good);         // query size
  throws(K, V, W, {{GaussianVector(rng, d, 1.0), n + 1}}, good);         // too long
  throws(K, V, W, ok, {{5, 8, 2}});                                      // 40 > 32 columns
  throws(K, V, W, {{GaussianVector(rng, d, 1.0), 4 + 64 + 15}}, good);   // 15 < 16 indexed
  throws(K, V, W, {{GaussianVector(rng, d, 1.0), 4 + 64 + 5}}, good, 6); // 5 < 6
  throws(K, V, W, {{GaussianVector(rng, d, 1.0), 50}}, good, 1);         // nothing indexed
  const OwnedMatrix wide = ref::simhash_matrix(1, d, 16, 1024);
  for (const LshPoint bad : {LshPoint{0, 8, 1}, LshPoint{17, 1, 1}, LshPoint{1, 0, 1},
                             LshPoint{1, 1025, 1}, LshPoint{1, 8, 0}, LshPoint{1, 8, 9}})
    throws(K, V, wide, ok, {good[0], bad});
}

} // namespace
} // namespace pig::tune
