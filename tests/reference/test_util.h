// Random inputs for the reference tests, from the reference's own seeded generator.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pig/reference/attention.h"
#include "pig/reference/magicpig.h"
#include "pig/reference/matrix.h"
#include "pig/reference/random.h"
#include "pig/reference/synthetic.h"

namespace pig::ref::testing {

inline std::vector<float> gaussian_vector(Rng &rng, std::size_t n, double sd = 1.0) {
  std::vector<float> v(n);
  for (float &x : v)
    x = float(sd * rng.gaussian());
  return v;
}

/// synthetic_problem of n tokens of head dim d with the given tail heaviness and sink mass.
inline AttentionProblem synthetic_head(std::uint64_t seed, std::size_t n, std::size_t d,
                                       double logit_std, double sink_mass) {
  SyntheticConfig cfg;
  cfg.n = n;
  cfg.d = d;
  cfg.seed = seed;
  cfg.logit_std = logit_std;
  cfg.sink_mass = sink_mass;
  return synthetic_problem(cfg);
}

inline OwnedMatrix gaussian_matrix(Rng &rng, std::size_t rows, std::size_t cols, double sd = 1.0) {
  OwnedMatrix m(rows, cols);
  m.data = gaussian_vector(rng, rows * cols, sd);
  return m;
}

/// The unbiasedness check of a sampling estimator over `draws` independent draws r: for
/// e = estimate(r), exp(e.attention.lse - exact.lse) (the partition function's ratio) must have
/// mean 1 and exp(e.attention.lse - exact.lse) * e.attention.out (the numerator) mean exact.out,
/// each within z = 5 standard errors of the sample mean (+1e-6). Returns the mean of size_of(e),
/// for the caller to check that the sample was neither empty nor everything.
template <typename Estimate, typename Size>
double expect_unbiased(const Attention &exact, std::size_t draws, Estimate &&estimate,
                       Size &&size_of, const std::string &what = "") {
  const std::size_t d = exact.out.size();
  std::vector<double> sum(d + 1, 0.0), sum2(d + 1, 0.0);
  double sampled = 0.0;
  for (std::size_t r = 0; r < draws; ++r) {
    const auto e = estimate(r);
    sampled += double(size_of(e)) / double(draws);
    const double ratio = std::exp(e.attention.lse - exact.lse);
    for (std::size_t j = 0; j <= d; ++j) {
      const double x = j == d ? ratio : ratio * e.attention.out[j];
      sum[j] += x;
      sum2[j] += x * x;
    }
  }
  for (std::size_t j = 0; j <= d; ++j) {
    const double mean = sum[j] / double(draws);
    const double sd = std::sqrt(std::max(0.0, sum2[j] / double(draws) - mean * mean));
    const double target = j == d ? 1.0 : exact.out[j];
    EXPECT_NEAR(mean, target, 5.0 * sd / std::sqrt(double(draws)) + 1e-6)
        << what << (j == d ? " partition function" : " numerator coordinate " + std::to_string(j));
  }
  return sampled;
}

/// MagicPIG's importance weights over the draw of W (estimate(r) returns a MagicPigResult):
/// expect_unbiased with the sample set's size.
template <typename Estimate>
double expect_unbiased_over_w(const Attention &exact, std::size_t draws, Estimate &&estimate,
                              const std::string &what = "") {
  return expect_unbiased(
      exact, draws, estimate, [](const MagicPigResult &e) { return e.sample.size(); }, what);
}

} // namespace pig::ref::testing
