#include "pig/reference/synthetic.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "pig/reference/random.h"

namespace pig::ref {

namespace {

std::vector<double> unit_gaussian(Rng &rng, std::size_t d) {
  std::vector<double> v(d);
  double norm = 0.0;
  for (double &x : v) {
    x = rng.gaussian();
    norm += x * x;
  }
  norm = std::sqrt(norm);
  for (double &x : v)
    x /= norm;
  return v;
}

} // namespace

AttentionProblem synthetic_problem(const SyntheticConfig &cfg) {
  if (cfg.n == 0 || cfg.d < 2)
    throw std::invalid_argument("synthetic_problem: need n >= 1 and d >= 2, got n = " +
                                std::to_string(cfg.n) + ", d = " + std::to_string(cfg.d));
  if (!(cfg.sink_mass >= 0.0 && cfg.sink_mass < 1.0))
    throw std::invalid_argument("synthetic_problem: sink_mass must be in [0, 1)");
  const std::size_t n = cfg.n, d = cfg.d;
  const double sqrt_d = std::sqrt(double(d));
  const double sigma = cfg.logit_std;
  Rng rng(cfg.seed);

  // Cone axis a, and a query direction at cosine -0.8 with it (keys and queries sit in opposite
  // cones, the geometry that makes centering necessary).
  const std::vector<double> a = unit_gaussian(rng, d);
  std::vector<double> r = unit_gaussian(rng, d);
  double ra = 0.0;
  for (std::size_t j = 0; j < d; ++j)
    ra += r[j] * a[j];
  double rn = 0.0;
  for (std::size_t j = 0; j < d; ++j) {
    r[j] -= ra * a[j];
    rn += r[j] * r[j];
  }
  rn = std::sqrt(rn);
  std::vector<double> qhat(d);
  for (std::size_t j = 0; j < d; ++j)
    qhat[j] = -0.8 * a[j] + 0.6 * r[j] / rn;

  AttentionProblem p{std::vector<float>(d), OwnedMatrix(n, d), OwnedMatrix(n, d)};
  // |q| = sqrt(d), so with scale 1/sqrt(d) a key component x along q-hat adds x to the logit.
  for (std::size_t j = 0; j < d; ++j)
    p.q[j] = float(sqrt_d * qhat[j]);

  // Keys: cone_offset * (noise norm) along a, plus isotropic noise sigma * g. The noise part of
  // the logit is sigma * z with z = qhat.g ~ N(0, 1): log-normal weights, a long tail.
  std::vector<double> mu_v(d), u_v(d);
  for (std::size_t j = 0; j < d; ++j) {
    mu_v[j] = rng.gaussian();
    u_v[j] = rng.gaussian();
  }
  std::vector<double> z(n, 0.0);
  const double offset = cfg.cone_offset * sigma * sqrt_d;
  if (!(cfg.key_locality >= 0.0 && cfg.key_locality < 1.0))
    throw std::invalid_argument("synthetic_problem: key_locality must be in [0, 1)");
  const double keep = cfg.key_locality, fresh = std::sqrt(1.0 - keep * keep);
  std::vector<double> g(d);
  for (std::size_t i = 0; i < n; ++i) {
    // g_i = rho g_{i-1} + sqrt(1 - rho^2) e_i: every g_i is N(0, I), neighbours correlated.
    for (std::size_t j = 0; j < d; ++j) {
      const double e = rng.gaussian();
      g[j] = i == 0 ? e : keep * g[j] + fresh * e;
      z[i] += qhat[j] * g[j];
    }
    for (std::size_t j = 0; j < d; ++j)
      p.K.at(i, j) = float(offset * a[j] + sigma * g[j]);
    // Values: a shared mean, a component that grows with the score (so TopK is biased), noise.
    const double along = i == 0 ? 0.0 : cfg.value_score_correlation * z[i];
    for (std::size_t j = 0; j < d; ++j)
      p.V.at(i, j) = float(cfg.value_mean * mu_v[j] + along * u_v[j] + rng.gaussian());
  }

  if (cfg.sink_mass > 0.0 && n > 1) {
    // Token 0 becomes the sink: no noise, and a boost along q-hat chosen so that it carries
    // exactly sink_mass of the softmax: e^b / (e^b + S) = sink_mass, S = sum_{i>0} e^{sigma z_i}.
    double tail = 0.0;
    for (std::size_t i = 1; i < n; ++i)
      tail += std::exp(sigma * z[i]);
    const double boost = std::log(cfg.sink_mass / (1.0 - cfg.sink_mass) * tail);
    for (std::size_t j = 0; j < d; ++j)
      p.K.at(0, j) = float(offset * a[j] + boost * qhat[j]);
  }
  return p;
}

} // namespace pig::ref
